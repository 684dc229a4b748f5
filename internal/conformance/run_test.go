package conformance

import (
	"slices"
	"testing"
)

// TestSuiteNumNodes: e2e.test is told the cluster's node count (tests that need more
// nodes skip themselves by it); 0 means the lab's default of 2.
func TestSuiteNumNodes(t *testing.T) {
	s := Suite{Binary: "e2e.test", Kubeconfig: "kubeconfig"}
	for _, c := range []struct {
		nodes int
		want  string
	}{{0, "--num-nodes=2"}, {2, "--num-nodes=2"}, {3, "--num-nodes=3"}} {
		args := s.args(Run{Focus: []string{"x"}, Nodes: c.nodes, OutDir: "out"}, "out/report.json")
		if !slices.Contains(args, c.want) {
			t.Errorf("Nodes %d: args %v, want %s", c.nodes, args, c.want)
		}
		if g := s.ginkgoArgs(Run{Focus: []string{"x"}, Procs: 4, Nodes: c.nodes, OutDir: "out"}, "out/report.json"); !slices.Contains(g, c.want) {
			t.Errorf("Nodes %d with ginkgo: args %v, want %s", c.nodes, g, c.want)
		}
	}
}
