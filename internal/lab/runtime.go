package lab

import (
	"context"
	"fmt"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Runtime is what runs a lab node's pods: one type per --runtime, chosen in one place
// (RuntimeOf), like the CNI flavours.
type Runtime interface {
	// Tools are the binaries the runtime needs, checked before `lab up` changes anything.
	Tools() []cni.Tool
	// Prepare writes what the node processes need (configuration, directories, cgroups)
	// during `lab up`, before the supervisor starts.
	Prepare(paths labplan.Paths, plan labplan.Plan) error
	// NodeProcesses are the per-node processes the supervisor starts, in order, after
	// the control plane and before the CNI flavour's daemons. self is the myelin binary.
	NodeProcesses(p labplan.Plan, paths labplan.Paths, self, kubeBin string) []labplan.Process
	// Started runs once one of those processes is ready, before the next one starts.
	Started(ctx context.Context, paths labplan.Paths, proc labplan.Process) error
	// Guard runs for as long as the supervisor does, undoing what the runtime's
	// processes change on the machine (the kubelet's sysctls).
	Guard(ctx context.Context, paths labplan.Paths)
	// Describe names the node processes for `lab up`'s progress line.
	Describe(nodes int) string
}

// RuntimeOf returns the runtime of --runtime; nil for one the lab doesn't know, which
// labplan.Options.Validate refuses before anything asks.
func RuntimeOf(r labplan.Runtime) Runtime {
	switch r {
	case labplan.RuntimeLab, "":
		return labKubelets{}
	case labplan.RuntimeContainerd:
		return containerdRuntime{}
	}
	return nil
}

// labKubelets is --runtime lab: one `myelin lab kubelet` per node (internal/lab/kubelet).
type labKubelets struct{}

func (labKubelets) Tools() []cni.Tool                                             { return nil }
func (labKubelets) Prepare(labplan.Paths, labplan.Plan) error                     { return nil }
func (labKubelets) Guard(context.Context, labplan.Paths)                          {}
func (labKubelets) Describe(nodes int) string                                     { return fmt.Sprintf("%d lab kubelets", nodes) }
func (labKubelets) Started(context.Context, labplan.Paths, labplan.Process) error { return nil }

func (labKubelets) NodeProcesses(p labplan.Plan, paths labplan.Paths, self, _ string) []labplan.Process {
	var procs []labplan.Process
	for _, n := range p.Nodes {
		procs = append(procs, labplan.Process{
			Name:   "kubelet-" + n.Name,
			Argv:   labplan.InNS(n.Name, self, "lab", "kubelet", "--node", n.Name, "--dir", paths.Dir),
			Cgroup: n.Name, // with the node's pods, which it starts
		})
	}
	return procs
}
