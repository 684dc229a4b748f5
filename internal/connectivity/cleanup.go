package connectivity

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/myelin-net/myelin/internal/podexec"

	authv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkPermissions asks the apiserver (SelfSubjectAccessReview) whether this user may
// do what the test does, so a missing permission is one line before anything is made.
func checkPermissions(ctx context.Context, o Options) error {
	checks := []authv1.ResourceAttributes{
		{Verb: "create", Resource: "namespaces"},
		{Verb: "create", Resource: "pods"},
		{Verb: "create", Resource: "services"},
		{Verb: "create", Resource: "networkpolicies", Group: "networking.k8s.io"},
		{Verb: "delete", Resource: "namespaces"},
	}
	if _, api := o.Exec.(podexec.API); api {
		checks = append(checks, authv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec"})
	}
	for _, c := range checks {
		review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &c}}
		got, err := o.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("check permissions: %w", err)
		}
		if !got.Status.Allowed {
			what := c.Resource
			if c.Subresource != "" {
				what += "/" + c.Subresource
			}
			return fmt.Errorf("permission denied: this user may not %s %s, which the connectivity test needs (kubectl auth can-i %s %s)",
				c.Verb, what, c.Verb, what)
		}
	}
	return nil
}

// cleanup deletes the test namespace, if it carries labelTest, and waits (up to a minute) until it is gone;
// with o.Keep it says where the pods are instead.
func cleanup(out io.Writer, o Options) {
	if o.Keep {
		fmt.Fprintf(out, "Kept namespace %s (--keep); remove it with: kubectl delete namespace %s\n", o.Namespace, o.Namespace)
		return
	}
	// A fresh context: the run's may be cancelled (Ctrl-C) and the namespace must go.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owned, err := ownedNamespace(ctx, o)
	if apierrors.IsNotFound(err) {
		return
	}
	if err == nil && !owned {
		fmt.Fprintf(out, "WARNING: namespace %s has no %s=true label: not deleting it\n", o.Namespace, labelTest)
		return
	}
	if err != nil {
		fmt.Fprintf(out, "WARNING: get namespace %s: %v; not deleting it\n", o.Namespace, err)
		return
	}
	err = o.Client.CoreV1().Namespaces().Delete(ctx, o.Namespace, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		fmt.Fprintf(out, "WARNING: delete namespace %s: %v\n", o.Namespace, err)
		return
	}
	for {
		_, err := o.Client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(out, "Deleted namespace %s\n", o.Namespace)
			return
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(out, "WARNING: namespace %s is still being deleted after a minute (kubectl get namespace %s)\n", o.Namespace, o.Namespace)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
