package connectivity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createNamespace creates the test namespace, labelled labelTest. It refuses a
// namespace that exists already: the test deletes its namespace at the end, and it
// must never delete one it did not make. created says whether this run made it.
func createNamespace(ctx context.Context, o Options) (created bool, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: map[string]string{labelTest: "true"}}}
	_, err = o.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("namespace %s already exists: the connectivity test needs a namespace of its own, which it deletes at the end; pick another --namespace (or leave it out) or delete %s first", o.Namespace, o.Namespace)
	}
	if err != nil {
		return false, fmt.Errorf("create namespace %s: %w", o.Namespace, err)
	}
	return true, nil
}

// ownedNamespace says whether the namespace is the connectivity test's: it carries
// labelTest. Cleanup deletes nothing else.
func ownedNamespace(ctx context.Context, o Options) (bool, error) {
	ns, err := o.Client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return ns.Labels[labelTest] == "true", nil
}
