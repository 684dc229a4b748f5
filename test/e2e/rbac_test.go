package e2e

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/config"
	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// checkAgentRBAC asks the real apiserver what the agent's identity may do: exactly
// what its code needs (its own ConfigMap by name, Nodes, Services, EndpointSlices,
// NodeConfigs, list/watch of Pods, Namespaces and NetworkPolicies, creating Events),
// nothing else (no other ConfigMap, no Secrets, no single Pod reads, no writes to
// Services, Nodes, Pods or NetworkPolicies). The agents of nodes run with it without a
// forbidden error in any control loop.
func checkAgentRBAC(t *testing.T, cs kubernetes.Interface, nodes ...string) {
	t.Helper()
	type access struct {
		verb, group, resource, namespace, name string
		allowed                                bool
	}
	for _, a := range []access{
		{"get", "", "configmaps", "kube-system", "myelin-config", true},
		{"get", "", "configmaps", "kube-system", "kube-root-ca.crt", false},
		{"get", "", "configmaps", "default", "myelin-config", false},
		{"list", "", "configmaps", "kube-system", "", false},
		{"update", "", "configmaps", "kube-system", "myelin-config", false},
		{"list", "", "secrets", "", "", false},
		{"get", "", "secrets", "kube-system", "", false},
		{"list", "", "pods", "", "", true},
		{"get", "", "pods", "default", "", false},
		{"update", "", "pods", "default", "", false},
		{"watch", "", "namespaces", "", "", true},
		{"watch", "networking.k8s.io", "networkpolicies", "", "", true},
		{"create", "networking.k8s.io", "networkpolicies", "default", "", false},
		{"list", "", "endpoints", "", "", false},
		{"create", "", "services", "default", "", false},
		{"patch", "", "nodes", "", labplan.NodeName(1), false},
		{"get", "", "nodes", "", labplan.NodeName(1), true},
		{"watch", "", "nodes", "", "", true},
		{"watch", "", "services", "", "", true},
		{"watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{"list", "myelin.io", "nodeconfigs", "kube-system", "", true},
		{"list", "myelin.io", "nodeconfigs", "", "", false}, // a tenant's NodeConfig configures no node
		{"list", "myelin.io", "nodeconfigs", "default", "", false},
		{"create", "", "events", "default", "", true},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: labmyelin.AgentUser, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource,
				Namespace: a.namespace, Name: a.name},
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview %+v: %v", a, err)
		}
		if got.Status.Allowed != a.allowed {
			t.Errorf("%s may %s %s %s/%s: %v, want %v (%s)", labmyelin.AgentUser, a.verb, a.resource, a.namespace, a.name,
				got.Status.Allowed, a.allowed, got.Status.Reason)
		}
	}
	for _, n := range nodes {
		for _, l := range agentStatus(t, n).Loops {
			if strings.Contains(strings.ToLower(l.LastError), "forbidden") {
				t.Errorf("agent on %s: loop %s was forbidden: %s", n, l.Name, l.LastError)
			}
		}
	}
}

// checkMissingConfigMap deletes kube-system/myelin-config and restarts node's agent
// (last in a test: the node comes back with the defaults): it starts, and its status
// and `myelin config` say that the ConfigMap is missing and defaults are used.
func checkMissingConfigMap(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	err := cs.CoreV1().ConfigMaps(config.ConfigMapNamespace).Delete(context.Background(), config.ConfigMapName, metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restartAgent(t, node)
	const notFound = "ConfigMap kube-system/myelin-config not found: built-in defaults are used"
	if st := agentStatus(t, node); !strings.Contains(st.Config.Warning, notFound) {
		t.Errorf("status of %s: config %+v, want a warning %q", node, st.Config, notFound)
	}
	out, err := myelin("config", "--node", node)
	if err != nil || !strings.Contains(out, "WARNING: "+notFound) {
		t.Errorf("myelin config --node %s: %v, want the warning\n%s", node, err, out)
	}
	// The profile set routing-mode native; now it is the default, and says why.
	found := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "routing-mode" {
			found = f[1] == "tunnel" && strings.HasSuffix(line, "default (no ConfigMap kube-system/myelin-config)")
		}
	}
	if !found {
		t.Errorf("myelin config --node %s: want routing-mode tunnel from the default, no ConfigMap\n%s", node, out)
	}
}
