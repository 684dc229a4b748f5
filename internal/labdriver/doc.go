// Package labdriver drives a running lab from a program — the bench and the e2e tests
// both use it — through the lab's real interfaces: the Kubernetes API server (NodeConfig
// objects), each agent's socket (health, status) and the supervisor's state file (the
// processes it runs). It never reaches into a component's internals.
package labdriver
