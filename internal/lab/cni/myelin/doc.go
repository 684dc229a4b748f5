// Package myelin is the lab's --cni myelin flavour: one myelin-agent per node (which
// installs myelin-cni and its conflist itself), the agent's least-privilege RBAC, the
// NodeConfig CRD and the myelin-config ConfigMap of the lab's profile.
package myelin
