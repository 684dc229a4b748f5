package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// A labPart is what one environment builds in its stage's lab once the lab is up.
type labPart interface {
	setup(ctx context.Context, c *Cluster, env string) (Endpoints, error)
	// teardown removes what setup built; it is safe after a partial setup, when
	// repeated and when the lab never came up.
	teardown(c *Cluster) error
}

// A LabEnv is an environment of a lab stage: it holds the stage's Cluster from Setup
// to Teardown and builds its part in it. Its name is stage-qualified
// ("native/bpf-cross-node"), so the same kind of environment in two stages gives
// distinct case names.
type LabEnv struct {
	name    string
	cluster *Cluster
	part    labPart
	held    bool
}

// Name implements Environment.
func (e *LabEnv) Name() string { return e.name }

// Available implements Environment.
func (e *LabEnv) Available() error {
	if err := e.cluster.Available(); err != nil {
		return err
	}
	if a, ok := e.part.(interface{ available() error }); ok {
		return a.available()
	}
	return nil
}

// Setup implements Environment. Every environment of a stage, even one that needs no
// Kubernetes, comes up after the lab: lab up refuses to start next to namespaces named
// myelin-*, which the bench's own are.
func (e *LabEnv) Setup(ctx context.Context) (Endpoints, error) {
	if !e.held {
		e.held = true
		if err := e.cluster.acquire(ctx); err != nil {
			return Endpoints{}, err
		}
	}
	return e.part.setup(ctx, e.cluster, e.name)
}

// Teardown implements Environment.
func (e *LabEnv) Teardown() error {
	if !e.held {
		return nil
	}
	e.held = false
	return errors.Join(e.part.teardown(e.cluster), e.cluster.release())
}

// nodeToNode is the cross-node limit: client and server in two lab nodes' own network
// namespaces, talking over the underlay (the server listens on its node's IP).
type nodeToNode struct{ client, server string }

func (n nodeToNode) setup(_ context.Context, c *Cluster, _ string) (Endpoints, error) {
	srv, err := c.NodeIP(n.server)
	if err != nil {
		return Endpoints{}, err
	}
	return Endpoints{
		Client:     NetNSHost{Path: labplan.NetNSPath(n.client)},
		Server:     NetNSHost{Path: labplan.NetNSPath(n.server)},
		ServerAddr: srv,
	}, nil
}

func (nodeToNode) teardown(*Cluster) error { return nil }

// podPair is a client pod and a server pod on the given lab nodes (the same node for
// same-node cases), networked by the lab's CNI.
type podPair struct {
	client, server string
	// hostRouting, when set, is the mode ("BPF" or "Legacy") the agents on both nodes
	// must report before anything is measured; they must also report source
	// validation on, or off with sourceCheckOff.
	hostRouting    string
	sourceCheckOff bool
	// tunnel, when set, is who the agents on both nodes must report encapsulating
	// tunnel mode's VXLAN ("BPF" or "myelin_vxlan").
	tunnel string
}

func (p podPair) setup(ctx context.Context, c *Cluster, env string) (Endpoints, error) {
	if c.kube == nil {
		return Endpoints{}, fmt.Errorf("the lab has no API client")
	}
	if p.hostRouting != "" {
		for _, node := range []string{p.client, p.server} {
			if err := checkModes(ctx, node, p); err != nil {
				return Endpoints{}, err
			}
		}
	}
	base := "bench-" + strings.ReplaceAll(env, "/", "-")
	pods, err := c.kube.runPods(ctx, map[string]string{base + "-client": p.client, base + "-server": p.server})
	if err != nil {
		return Endpoints{}, err
	}
	cl, srv := pods[base+"-client"], pods[base+"-server"]
	return Endpoints{Client: NetNSHost{Path: cl.NetNS}, Server: NetNSHost{Path: srv.NetNS}, ServerAddr: srv.IP}, nil
}

// teardown leaves the pods to lab down, which follows when the stage ends.
func (podPair) teardown(*Cluster) error { return nil }

// vethPart is the bare veth pair built inside a lab stage (after its lab).
type vethPart struct{ pair *VethPair }

func (v vethPart) setup(ctx context.Context, _ *Cluster, _ string) (Endpoints, error) {
	return v.pair.Setup(ctx)
}

func (v vethPart) teardown(*Cluster) error { return v.pair.Teardown() }
