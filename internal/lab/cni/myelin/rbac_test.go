package myelin

import (
	"slices"
	"testing"
)

// The agent reads one ConfigMap, by name, and lists NodeConfigs through a kube-system
// Role; its ClusterRole grants no ConfigMaps, Secrets, Endpoints or NodeConfigs (one
// in a tenant's namespace must not configure nodes), only list/watch on Pods,
// Namespaces and NetworkPolicies (NetworkPolicy enforcement), and no writes but
// creating Events.
func TestAgentRBACLeastPrivilege(t *testing.T) {
	r := newAgentRBAC()
	policyReads := 0
	for _, rule := range r.ClusterRole.Rules {
		for _, res := range rule.Resources {
			if slices.Contains([]string{"configmaps", "secrets", "endpoints", "nodeconfigs", "*"}, res) {
				t.Errorf("ClusterRole grants %v on %s", rule.Verbs, res)
			}
			if slices.Contains([]string{"pods", "namespaces", "networkpolicies"}, res) {
				policyReads++
				if !slices.Equal(rule.Verbs, []string{"list", "watch"}) {
					t.Errorf("ClusterRole grants %v on %s, want list and watch only", rule.Verbs, res)
				}
			}
		}
		for _, v := range rule.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, v) && !(v == "create" && slices.Equal(rule.Resources, []string{"events"})) {
				t.Errorf("ClusterRole grants %s on %v", v, rule.Resources)
			}
		}
	}
	if policyReads != 3 {
		t.Errorf("ClusterRole reads %d of pods, namespaces and networkpolicies, want all 3", policyReads)
	}
	if r.Role.Namespace != "kube-system" || len(r.Role.Rules) != 2 {
		t.Fatalf("Role = %+v, want two rules in kube-system", r.Role)
	}
	rule := r.Role.Rules[0]
	if !slices.Equal(rule.Resources, []string{"configmaps"}) || !slices.Equal(rule.ResourceNames, []string{"myelin-config"}) ||
		!slices.Equal(rule.Verbs, []string{"get"}) {
		t.Errorf("Role rule = %+v, want get on configmaps/myelin-config only", rule)
	}
	if rule := r.Role.Rules[1]; !slices.Equal(rule.APIGroups, []string{"myelin.io"}) ||
		!slices.Equal(rule.Resources, []string{"nodeconfigs"}) || !slices.Equal(rule.Verbs, []string{"list"}) {
		t.Errorf("Role rule = %+v, want list on nodeconfigs only", rule)
	}
	if r.RoleBinding.Namespace != r.Role.Namespace || r.RoleBinding.RoleRef.Kind != "Role" || r.RoleBinding.RoleRef.Name != r.Role.Name ||
		r.RoleBinding.Subjects[0].Name != AgentUser || r.ClusterRoleBinding.Subjects[0].Name != AgentUser {
		t.Errorf("bindings do not bind %s to the roles: %+v %+v", AgentUser, r.RoleBinding, r.ClusterRoleBinding)
	}
}
