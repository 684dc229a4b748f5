package myelin

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/lab/cni"
)

// agentRBACName names the agent's ClusterRole, Role and their bindings.
const agentRBACName = "myelin-agent"

// agentRBAC is the agent's least privilege: what its code reads and writes, nothing
// more. Cluster-wide: Nodes (its own at start, the others for routes and tunnels;
// list for the no-masquerade set), Services and EndpointSlices (the Service watcher's
// informers: list and watch only) and creating Events (on its Node). In kube-system: its
// ConfigMap, one named object (a Role with resourceNames, so the agent can read no other
// ConfigMap), and the NodeConfigs, listed at start (none from other namespaces).
type agentRBAC struct {
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Role               *rbacv1.Role
	RoleBinding        *rbacv1.RoleBinding
}

func newAgentRBAC() agentRBAC {
	subjects := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: AgentUser}}
	return agentRBAC{
		ClusterRole: &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: agentRBACName},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
				// NetworkPolicy enforcement: the policies, every pod (peers by
				// labels and address) and the namespaces' labels.
				{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			},
		},
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: agentRBACName},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: agentRBACName},
			Subjects:   subjects,
		},
		Role: &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: agentRBACName, Namespace: config.ConfigMapNamespace},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{config.ConfigMapName}, Verbs: []string{"get"}},
				// NodeConfigs are read from kube-system only (config.Load).
				{APIGroups: []string{"myelin.io"}, Resources: []string{"nodeconfigs"}, Verbs: []string{"list"}},
			},
		},
		RoleBinding: &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: agentRBACName, Namespace: config.ConfigMapNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: agentRBACName},
			Subjects:   subjects,
		},
	}
}

// createAgentRBAC creates the agent's roles and bindings (existing ones are kept).
func createAgentRBAC(ctx context.Context, cs kubernetes.Interface) error {
	r := newAgentRBAC()
	steps := []struct {
		what string
		do   func() error
	}{
		{"ClusterRole " + agentRBACName, func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, r.ClusterRole, metav1.CreateOptions{})
			return err
		}},
		{"ClusterRoleBinding " + agentRBACName, func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, r.ClusterRoleBinding, metav1.CreateOptions{})
			return err
		}},
		{"Role " + r.Role.Namespace + "/" + agentRBACName, func() error {
			_, err := cs.RbacV1().Roles(r.Role.Namespace).Create(ctx, r.Role, metav1.CreateOptions{})
			return err
		}},
		{"RoleBinding " + r.RoleBinding.Namespace + "/" + agentRBACName, func() error {
			_, err := cs.RbacV1().RoleBindings(r.RoleBinding.Namespace).Create(ctx, r.RoleBinding, metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := cni.Create(s.do); err != nil {
			return fmt.Errorf("create %s: %w", s.what, err)
		}
	}
	return nil
}
