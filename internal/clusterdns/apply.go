package clusterdns

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Apply creates the objects of o, or updates the ones that exist (running it again
// after changing the options changes the cluster to match).
func Apply(ctx context.Context, cs kubernetes.Interface, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	for _, obj := range o.Objects() {
		if err := apply(ctx, cs, obj); err != nil {
			return fmt.Errorf("apply cluster DNS: %w", err)
		}
	}
	return nil
}

func apply(ctx context.Context, cs kubernetes.Interface, obj any) error {
	var create, update func() error
	var what string
	c, u := metav1.CreateOptions{}, metav1.UpdateOptions{}
	switch v := obj.(type) {
	case *corev1.ServiceAccount:
		what = "serviceaccount/" + v.Name
		create = func() error { _, err := cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, v, c); return err }
		update = func() error { return nil }
	case *rbacv1.ClusterRole:
		what = "clusterrole/" + v.Name
		create = func() error { _, err := cs.RbacV1().ClusterRoles().Create(ctx, v, c); return err }
		update = func() error { _, err := cs.RbacV1().ClusterRoles().Update(ctx, v, u); return err }
	case *rbacv1.ClusterRoleBinding:
		what = "clusterrolebinding/" + v.Name
		create = func() error { _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, v, c); return err }
		update = func() error { _, err := cs.RbacV1().ClusterRoleBindings().Update(ctx, v, u); return err }
	case *corev1.ConfigMap:
		what = "configmap/" + v.Name
		create = func() error { _, err := cs.CoreV1().ConfigMaps(Namespace).Create(ctx, v, c); return err }
		update = func() error { _, err := cs.CoreV1().ConfigMaps(Namespace).Update(ctx, v, u); return err }
	case *appsv1.Deployment:
		what = "deployment/" + v.Name
		create = func() error { _, err := cs.AppsV1().Deployments(Namespace).Create(ctx, v, c); return err }
		update = func() error { _, err := cs.AppsV1().Deployments(Namespace).Update(ctx, v, u); return err }
	case *corev1.Service:
		what = "service/" + v.Name
		create = func() error { _, err := cs.CoreV1().Services(Namespace).Create(ctx, v, c); return err }
		update = func() error {
			cur, err := cs.CoreV1().Services(Namespace).Get(ctx, v.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			v.ResourceVersion = cur.ResourceVersion
			_, err = cs.CoreV1().Services(Namespace).Update(ctx, v, u)
			return err
		}
	default:
		return fmt.Errorf("unknown object %T", obj)
	}
	err := create()
	if apierrors.IsAlreadyExists(err) {
		err = update()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Wait waits until the CoreDNS Deployment has a ready replica, or returns what it saw
// last.
func Wait(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no deployment yet"
	for {
		d, err := cs.AppsV1().Deployments(Namespace).Get(ctx, Name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case d.Status.ReadyReplicas > 0:
			return nil
		default:
			last = fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for cluster DNS (deployment %s/%s): %s; see kubectl -n %s describe pods -l k8s-app=kube-dns", Namespace, Name, last, Namespace)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
