// Package memlimit sets the agent's soft memory limit: the Go runtime's GOMEMLIMIT,
// chosen from the memory-limit configuration key, the agent's cgroup limit and the
// GOMEMLIMIT environment variable (Decide, pure), and applied and kept up to date
// (Apply, which reads the cgroup and watches the live heap).
package memlimit
