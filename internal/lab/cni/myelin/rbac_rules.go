package myelin

import rbacv1 "k8s.io/api/rbac/v1"

// AgentRules are the agent's least-privilege rules: the ClusterRole's and the
// kube-system Role's. The Helm chart's roles must grant exactly these (test/install
// compares them), so the lab and real clusters cannot drift apart.
func AgentRules() (cluster, namespaced []rbacv1.PolicyRule) {
	r := newAgentRBAC()
	return r.ClusterRole.Rules, r.Role.Rules
}
