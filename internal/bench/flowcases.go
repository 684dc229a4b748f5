package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// flowsKey switches the datapath's flow records and the agents' flow store; the bench
// turns it off on one node to measure what flows cost (docs/observability.md).
const flowsKey = "enable-hubble"

// noFlowsPair is a same-node podPair on a node whose agent runs with flows off; it
// checks that before measuring, and that the node of the pair it is compared to runs
// with flows on.
type noFlowsPair struct {
	podPair
	flowsOnNode string
}

func (p noFlowsPair) setup(ctx context.Context, c *Cluster, env string) (Endpoints, error) {
	if err := checkFlows(ctx, p.client, "false"); err != nil {
		return Endpoints{}, err
	}
	if err := checkFlows(ctx, p.flowsOnNode, "true"); err != nil {
		return Endpoints{}, err
	}
	return p.podPair.setup(ctx, c, env)
}

// checkFlows fails unless node's agent runs with enable-hubble want.
func checkFlows(ctx context.Context, node, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cv, err := api.NewClient(api.NodeSocket(node)).Config(ctx)
	if err != nil {
		return fmt.Errorf("read %s's configuration: %w", node, err)
	}
	for _, e := range cv.Effective {
		if e.Key == flowsKey && e.Value == want {
			return nil
		}
	}
	return fmt.Errorf("%s does not run with %s %s", node, flowsKey, want)
}

// flowsOff adds bpf-noflows-same-node: two pods on node n, whose agent runs with
// enable-hubble false, compared to withFlows (the same BPF path on node on, flows on
// by default): what flow records cost. TCP_RR, TCP_CRR and TCP_STREAM, both placements.
func (s *stageBuilder) flowsOff(n, on int, withFlows Environment) {
	node := labplan.NodeName(n)
	off := s.env("bpf-noflows-same-node", noFlowsPair{
		podPair:     podPair{client: node, server: node, hostRouting: hostRoutingBPF},
		flowsOnNode: labplan.NodeName(on),
	})
	for _, c := range Matrix(off, GroupMyelin, withFlows, []Workload{TCPRR(), TCPCRR(), TCPStream()}, Placements()) {
		c.Stage = s.stage
		s.cases = append(s.cases, c)
	}
}
