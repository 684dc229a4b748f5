package myelin

import (
	"context"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// AgentUser is the identity of myelin-agent in the lab (its client certificate's CN),
// bound to the myelin-agent ClusterRole and kube-system Role (rbac.go) as a
// DaemonSet's ServiceAccount would be.
const AgentUser = "myelin-agent"

// AgentProcess names the supervised process (and its log) of a node's myelin agent.
func AgentProcess(node string) string { return "agent-" + node }

// Flavour runs myelin-agent on every node; the lab kubelets call myelin-cni.
type Flavour struct{}

var _ cni.Flavour = Flavour{}

// Tools are myelin-agent and myelin-cni, built next to the myelin binary.
func (Flavour) Tools(self string) []cni.Tool {
	var tools []cni.Tool
	for _, b := range []string{"myelin-agent", "myelin-cni"} {
		tools = append(tools, cni.Tool{Path: filepath.Join(filepath.Dir(self), b), Fix: "build it next to myelin with: make build"})
	}
	return tools
}

// RelayProcess names the supervised `myelin relay` (and its log).
const RelayProcess = "hubble-relay"

// RelayAddress is where the lab's relay serves the Hubble API: loopback of the root
// netns only (`hubble observe --server localhost:4245` on the lab machine).
const RelayAddress = "127.0.0.1:4245"

// Processes are one myelin-agent per node, in the node's netns, with per-node state,
// pins and CNI directories, then the Hubble relay in the root netns (it reaches the
// agents' :4244 on segment A's node addresses through the control-plane host's veth;
// nodes of an L3 topology's segment B are reported unavailable).
func (Flavour) Processes(p labplan.Plan, paths labplan.Paths, self string) []labplan.Process {
	bin := filepath.Dir(self)
	var procs []labplan.Process
	for _, n := range p.Nodes {
		procs = append(procs, labplan.Process{
			Name: AgentProcess(n.Name),
			Argv: labplan.InNS(n.Name, filepath.Join(bin, "myelin-agent"), "--node", n.Name,
				"--kubeconfig", paths.ComponentKubeconfig(AgentUser),
				"--state-dir", nodelayout.PerNode(nodelayout.StateDir, n.Name),
				"--bpffs-dir", nodelayout.PerNode(nodelayout.BPFFSDir, n.Name),
				"--cni-bin-dir", paths.CNIBinDir(n.Name),
				"--cni-conf-dir", paths.CNIConfDir(n.Name),
				"--cni-plugin", filepath.Join(bin, "myelin-cni"),
				"--cgroup-root", labplan.Cgroup2Dir(n.Name)),
			Cgroup: n.Name,
		})
	}
	return append(procs, labplan.Process{
		Name: RelayProcess,
		Argv: []string{self, "relay", "--listen", RelayAddress, "--kubeconfig", paths.ComponentKubeconfig(AgentUser),
			"--dial-device", labplan.ControlPlaneLink}, // nothing by the machine's default route (lab.Dial)
	})
}

// Daemons names the agents for `lab up`'s progress line.
func (Flavour) Daemons(labplan.Plan) string { return " with myelin-agent" }

// Bootstrap creates the agent's RBAC, the CRDs and the myelin-config ConfigMap of the
// lab's profile.
func (Flavour) Bootstrap(ctx context.Context, c cni.Cluster) error {
	if err := createAgentRBAC(ctx, c.Kube); err != nil {
		return err
	}
	if err := cni.Create(func() error { return k8s.EnsureCRDs(ctx, c.Dynamic) }); err != nil {
		return err
	}
	return applyProfile(ctx, c.Kube, c.Plan)
}

// NodeNetwork does nothing: myelin-agent installs the node's conflist itself.
func (Flavour) NodeNetwork(context.Context, cni.Node) {}
