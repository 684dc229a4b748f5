package connectivity

import (
	"bytes"
	"context"
	"strings"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

type noExec struct{}

func (noExec) Exec(context.Context, string, string, []string) (string, error) { return "", nil }

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// fakeCluster is a fake clientset with one Ready node that allows every access review.
func fakeCluster(objs ...runtime.Object) *fake.Clientset {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
	}}
	cs := fake.NewSimpleClientset(append(objs, n)...)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authv1.SelfSubjectAccessReview{Status: authv1.SubjectAccessReviewStatus{Allowed: true}}, nil
	})
	return cs
}

func exists(t *testing.T, cs *fake.Clientset, name string) bool {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// An existing namespace given with --namespace is refused, with a one-line error
// naming it, and survives the run.
func TestRunRefusesExistingNamespace(t *testing.T) {
	for _, labels := range []map[string]string{nil, {labelTest: "true"}} {
		cs := fakeCluster(namespace("prod", labels))
		o := Options{Client: cs, Exec: noExec{}, Image: "img", Myelin: "/myelin", Namespace: "prod",
			CheckMyelin: func(context.Context) error { return nil }}
		var out bytes.Buffer
		err := Run(context.Background(), &out, o)
		if err == nil || !strings.Contains(err.Error(), "namespace prod already exists") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Run with an existing namespace: err = %v, want one line naming prod", err)
		}
		if out.Len() != 0 {
			t.Errorf("Run printed %q before refusing the namespace, want only the error", out.String())
		}
		if !exists(t, cs, "prod") {
			t.Fatalf("Run deleted the existing namespace prod; output:\n%s", out.String())
		}
	}
}

func TestCreateNamespaceLabels(t *testing.T) {
	cs := fakeCluster()
	created, err := createNamespace(context.Background(), Options{Client: cs, Namespace: "t1"})
	if err != nil || !created {
		t.Fatalf("createNamespace = %v, %v; want true, nil", created, err)
	}
	ns, _ := cs.CoreV1().Namespaces().Get(context.Background(), "t1", metav1.GetOptions{})
	if ns.Labels[labelTest] != "true" {
		t.Fatalf("namespace labels = %v, want %s=true", ns.Labels, labelTest)
	}
}

// cleanup deletes only a namespace labelled as the test's, even after the run's
// context was cancelled (Ctrl-C).
func TestCleanupOnlyOwnNamespace(t *testing.T) {
	cs := fakeCluster(namespace("mine", map[string]string{labelTest: "true"}), namespace("other", nil))
	var out bytes.Buffer
	cleanup(&out, Options{Client: cs, Namespace: "other"})
	if !exists(t, cs, "other") {
		t.Fatal("cleanup deleted a namespace without the test's label")
	}
	if !strings.Contains(out.String(), "not deleting") {
		t.Errorf("cleanup output %q does not say it left the namespace", out.String())
	}
	cleanup(&out, Options{Client: cs, Namespace: "mine"})
	if exists(t, cs, "mine") {
		t.Fatalf("cleanup left the test's own namespace; output:\n%s", out.String())
	}
}

// A run cancelled after it created its namespace still deletes it.
func TestRunCancelledCleansUp(t *testing.T) {
	cs := fakeCluster()
	ctx, cancel := context.WithCancel(context.Background())
	cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // Ctrl-C while the pods are being made
		return true, nil, context.Canceled
	})
	o := Options{Client: cs, Exec: noExec{}, Image: "img", Myelin: "/myelin", Namespace: "t2",
		CheckMyelin: func(context.Context) error { return nil }}
	var out bytes.Buffer
	if err := Run(ctx, &out, o); err == nil {
		t.Fatal("Run succeeded after a cancel")
	}
	if exists(t, cs, "t2") {
		t.Fatalf("namespace t2 left after a cancelled run; output:\n%s", out.String())
	}
}
