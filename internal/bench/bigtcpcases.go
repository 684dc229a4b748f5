package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
)

// StageBIGTCP is a native lab whose nodes 1-2 run with IPv4 BIG TCP off and 3-4 with
// it on (docs/datapath.md, "IPv4 BIG TCP"): bulk TCP both ways in the same run.
const StageBIGTCP = "bigtcp"

// bigTCPKey switches IPv4 BIG TCP on the node's devices and new pods' veths.
const bigTCPKey = "enable-ipv4-big-tcp"

// bigTCPPair is a podPair (BPF host routing) on nodes whose agents must report IPv4
// BIG TCP on (on) or off before anything is measured.
type bigTCPPair struct {
	podPair
	on bool
}

func (p bigTCPPair) setup(ctx context.Context, c *Cluster, env string) (Endpoints, error) {
	for _, node := range []string{p.client, p.server} {
		if err := checkBIGTCP(ctx, node, p.on); err != nil {
			return Endpoints{}, err
		}
	}
	return p.podPair.setup(ctx, c, env)
}

// bigTCPNodes is nodeToNode between nodes whose agents must report BIG TCP on: the
// node's own TCP over an uplink with 192 KiB GSO, the limit for the pods on them.
type bigTCPNodes struct{ nodeToNode }

func (n bigTCPNodes) setup(ctx context.Context, c *Cluster, env string) (Endpoints, error) {
	for _, node := range []string{n.client, n.server} {
		if err := checkBIGTCP(ctx, node, true); err != nil {
			return Endpoints{}, err
		}
	}
	return n.nodeToNode.setup(ctx, c, env)
}

// checkBIGTCP fails unless node's agent reports IPv4 BIG TCP on (a size above 64
// KiB for new pods) or off, as want says.
func checkBIGTCP(ctx context.Context, node string, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := labdriver.AgentStatus(ctx, node)
	if err != nil {
		return err
	}
	if on := st.BIGTCP.Size > 0; on != want {
		return fmt.Errorf("%s has IPv4 BIG TCP %v (size %d, %s), want %v", node, on, st.BIGTCP.Size, st.BIGTCP.Reason, want)
	}
	return nil
}

// bigTCPStage is StageBIGTCP: TCP_STREAM (throughput and CPU per KB) of pods with BPF
// host routing, BIG TCP off on nodes 1-2 and on on nodes 3-4, each placement, same
// node and cross node; the on cases are compared to the off ones, the off ones to
// node-to-node and the bare veth pair, and node-to-node with BIG TCP (3 to 4) to the
// plain one.
func bigTCPStage(prefix string) []Case {
	off, on := map[string]string{bigTCPKey: "false"}, map[string]string{bigTCPKey: "true"}
	spec := LabSpec{Nodes: 4, CNI: string(labplan.CNIMyelin), Profile: StageNative, Overrides: []NodeOverride{
		{Name: "bigtcp-off", Nodes: []string{labplan.NodeName(1), labplan.NodeName(2)}, Settings: off},
		{Name: "bigtcp-on", Nodes: []string{labplan.NodeName(3), labplan.NodeName(4)}, Settings: on},
	}}
	s := &stageBuilder{stage: StageBIGTCP, cluster: NewCluster(spec)}
	s.nodeToNode = s.env("node-to-node", nodeToNode{client: labplan.NodeName(1), server: labplan.NodeName(2)})
	s.veth = s.env("veth-pair", vethPart{pair: &VethPair{Prefix: prefix}})
	stream := []Workload{TCPStream()}
	add := func(env Environment, group string, baseline Environment) {
		for _, c := range Matrix(env, group, baseline, stream, Placements()) {
			c.Stage = s.stage
			s.cases = append(s.cases, c)
		}
	}
	pair := func(name string, a, b int, on bool) Environment {
		return s.env(name, bigTCPPair{podPair: podPair{client: labplan.NodeName(a), server: labplan.NodeName(b), hostRouting: hostRoutingBPF}, on: on})
	}
	add(s.nodeToNode, GroupBaseline, nil)
	add(s.veth, GroupBaseline, nil)
	add(s.env("node-to-node-bigtcp", bigTCPNodes{nodeToNode{client: labplan.NodeName(3), server: labplan.NodeName(4)}}), GroupBaseline, s.nodeToNode)
	crossOff, sameOff := pair("bpf-cross-node", 1, 2, false), pair("bpf-same-node", 1, 1, false)
	add(crossOff, GroupMyelin, s.nodeToNode)
	add(sameOff, GroupMyelin, s.veth)
	add(pair("bigtcp-cross-node", 3, 4, true), GroupMyelin, crossOff)
	add(pair("bigtcp-same-node", 3, 3, true), GroupMyelin, sameOff)
	return s.cases
}
