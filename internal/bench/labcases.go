package bench

import (
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// Lab stages, in the order they run. Each builds one lab; a routing mode or a CNI is
// lab-wide, so they cannot share one.
const (
	StageNative        = "native"
	StageTunnel        = "tunnel"
	StagePlain         = "plain"
	StageFlannelVXLAN  = "flannel-vxlan"
	StageFlannelHostGW = "flannel-host-gw"
)

// Host routing modes as the agent reports them.
const (
	hostRoutingBPF    = "BPF"
	hostRoutingLegacy = "Legacy"
)

// LabCases are the cases measured in labs, stage by stage, with the namespaces the
// bench creates itself named from prefix.
func LabCases(prefix string) []Case {
	var cases []Case
	for _, profile := range []string{StageNative, StageTunnel} {
		cases = append(cases, myelinStage(profile, prefix)...)
	}
	cases = append(cases, bigTCPStage(prefix)...) // bigtcpcases.go
	cases = append(cases, plainStage(prefix)...)
	cases = append(cases, flannelStage(StageFlannelVXLAN, "vxlan", prefix)...)
	return append(cases, flannelStage(StageFlannelHostGW, "host-gw", prefix)...)
}

// stageBuilder collects the environments and cases of one lab stage.
type stageBuilder struct {
	stage   string
	cluster *Cluster
	cases   []Case
	// The stage's baselines: node-to-node (cross-node limit) and the bare veth pair
	// (same-node limit).
	nodeToNode, veth Environment
	// tunnel is who the stage's BPF-routed nodes must report encapsulating VXLAN
	// with (podPair.tunnel): "BPF" in the tunnel stage, "" elsewhere.
	tunnel string
}

func newStage(stage string, spec LabSpec, prefix string) *stageBuilder {
	s := &stageBuilder{stage: stage, cluster: NewCluster(spec)}
	s.nodeToNode = s.env("node-to-node", nodeToNode{client: labplan.NodeName(1), server: labplan.NodeName(2)})
	s.veth = s.env("veth-pair", vethPart{pair: &VethPair{Prefix: prefix}})
	s.add(s.nodeToNode, GroupBaseline, nil)
	s.add(s.veth, GroupBaseline, nil)
	return s
}

// env names an environment of the stage.
func (s *stageBuilder) env(name string, part labPart) Environment {
	return &LabEnv{name: s.stage + "/" + name, cluster: s.cluster, part: part}
}

// add adds the client/server matrix of env, compared to baseline.
func (s *stageBuilder) add(env Environment, group string, baseline Environment) {
	for _, c := range Matrix(env, group, baseline, ClientServerWorkloads(), Placements()) {
		c.Stage = s.stage
		s.cases = append(s.cases, c)
	}
}

// pods adds two pod environments and returns them: <kind>-cross-node (a pod on node a
// to one on node b) compared to node-to-node, and <kind>-same-node (both on node a)
// compared to the veth pair.
func (s *stageBuilder) pods(kind, group string, a, b int, hostRouting string) (cross, same Environment) {
	var encap string // who must encapsulate: only BPF host routing's nodes are checked
	if hostRouting == hostRoutingBPF {
		encap = s.tunnel
	}
	cross = s.env(kind+"-cross-node", podPair{client: labplan.NodeName(a), server: labplan.NodeName(b), hostRouting: hostRouting, tunnel: encap})
	same = s.env(kind+"-same-node", podPair{client: labplan.NodeName(a), server: labplan.NodeName(a), hostRouting: hostRouting, tunnel: encap})
	s.add(cross, group, s.nodeToNode)
	s.add(same, group, s.veth)
	return cross, same
}

// sourceCheckOff adds bpf-nocheck-same-node (two pods on node a) and
// bpf-nocheck-cross-node (a pod on node a to one on node b), whose agents run
// with enable-source-ip-verification false, compared to withCheckSame and
// withCheckCross (the same BPF paths with the checks): what source validation
// costs, the pods' (myelin_from_pod) and the node's own packets'
// (myelin_to_netdev, which every packet leaving a node passes). TCP_RR only, in
// both placements: request/response is where one more lookup per packet would
// show.
func (s *stageBuilder) sourceCheckOff(a, b int, withCheckSame, withCheckCross Environment) {
	same := s.env("bpf-nocheck-same-node", podPair{client: labplan.NodeName(a), server: labplan.NodeName(a), hostRouting: hostRoutingBPF, sourceCheckOff: true})
	cross := s.env("bpf-nocheck-cross-node", podPair{client: labplan.NodeName(a), server: labplan.NodeName(b), hostRouting: hostRoutingBPF, sourceCheckOff: true})
	for _, pair := range [][2]Environment{{same, withCheckSame}, {cross, withCheckCross}} {
		for _, c := range Matrix(pair[0], GroupMyelin, pair[1], []Workload{TCPRR()}, Placements()) {
			c.Stage = s.stage
			s.cases = append(s.cases, c)
		}
	}
}

// deviceTunnel adds bpf-devicetunnel-cross-node: a pod on node a to one on node b,
// whose agents run with enable-bpf-tunnel false (all VXLAN through myelin_vxlan),
// compared to node-to-node as bpf-cross-node is: what the tunnel in BPF gains, in
// the same run. TCP_RR, TCP_CRR and TCP_STREAM, both placements.
func (s *stageBuilder) deviceTunnel(a, b int) {
	env := s.env("bpf-devicetunnel-cross-node", podPair{client: labplan.NodeName(a), server: labplan.NodeName(b),
		hostRouting: hostRoutingBPF, tunnel: tunnel.DeviceName})
	for _, c := range Matrix(env, GroupMyelin, s.nodeToNode, []Workload{TCPRR(), TCPCRR(), TCPStream()}, Placements()) {
		c.Stage = s.stage
		s.cases = append(s.cases, c)
	}
}

// myelinStage is a myelin lab in profile: nodes 1-2 with BPF host routing, nodes 3-4
// moved to legacy host routing by a NodeConfig. The native stage has a fifth and a
// seventh node, BPF with source validation off, for what the checks cost, and a
// sixth, BPF with flows off, for what flow records cost; the tunnel stage has a fifth
// and a sixth with the tunnel left to the device, for what the tunnel in BPF gains.
func myelinStage(profile, prefix string) []Case {
	spec := LabSpec{Nodes: 4, CNI: string(labplan.CNIMyelin), Profile: profile, Overrides: []NodeOverride{
		{Name: "legacy", Nodes: []string{labplan.NodeName(3), labplan.NodeName(4)}, Settings: map[string]string{"host-routing": "legacy"}},
	}}
	switch profile {
	case StageNative:
		spec.Nodes = 7
		spec.Overrides = append(spec.Overrides, NodeOverride{Name: "no-flows",
			Nodes: []string{labplan.NodeName(6)}, Settings: map[string]string{flowsKey: "false"}})
		spec.Overrides = append(spec.Overrides, NodeOverride{Name: "no-source-check",
			Nodes: []string{labplan.NodeName(5), labplan.NodeName(7)}, Settings: map[string]string{sourceValidationKey: "false"}})
	case StageTunnel:
		spec.Nodes = 6
		spec.Overrides = append(spec.Overrides, NodeOverride{Name: "device-tunnel",
			Nodes: []string{labplan.NodeName(5), labplan.NodeName(6)}, Settings: map[string]string{bpfTunnelKey: "false"}})
	}
	s := newStage(profile, spec, prefix)
	if profile == StageTunnel {
		s.tunnel = "BPF"
	}
	bpfCross, bpfSame := s.pods("bpf", GroupMyelin, 1, 2, hostRoutingBPF)
	s.pods("legacy", GroupMyelin, 3, 4, hostRoutingLegacy)
	switch profile {
	case StageNative:
		s.sourceCheckOff(5, 7, bpfSame, bpfCross)
		s.flowsOff(6, 1, bpfSame) // flowcases.go
		s.policyCases(1, 2)       // policycases.go
	case StageTunnel:
		s.deviceTunnel(5, 6)
	}
	return s.cases
}

// bpfTunnelKey switches the tunnel in BPF; the bench turns it off on two nodes to
// measure it against the device in the same run.
const bpfTunnelKey = "enable-bpf-tunnel"

// sourceValidationKey switches the datapath's check of pods' source addresses; the
// bench turns it off only to measure what the check costs.
const sourceValidationKey = "enable-source-ip-verification"

// plainStage is pods routed by the plain kernel (the lab's --cni bridge: a bridge per
// node and static routes between nodes, what host-gw CNIs do) and pods over plain
// kernel VXLAN built by hand in the same lab's nodes.
func plainStage(prefix string) []Case {
	s := newStage(StagePlain, LabSpec{Nodes: 2, CNI: string(labplan.CNIBridge)}, prefix)
	s.pods("bridge", GroupBaseline, 1, 2, "")
	s.add(s.env("vxlan-cross-node", plainVXLAN{prefix: prefix, client: 1, server: 2}), GroupBaseline, s.nodeToNode)
	return s.cases
}

// flannelStage is Flannel with the given backend in a 2-node lab.
func flannelStage(stage, backend, prefix string) []Case {
	s := newStage(stage, LabSpec{Nodes: 2, CNI: string(labplan.CNIFlannel), FlannelBackend: backend}, prefix)
	s.pods("flannel", GroupPeer, 1, 2, "")
	return s.cases
}
