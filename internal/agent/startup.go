package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/memlimit"
	"github.com/myelin-net/myelin/internal/routing"
)

// startup is what the agent knows once it has read its Node and configuration and
// decided its plan, before it changes anything on the node.
type startup struct {
	cfg     Config
	conf    config.Config // what GET /v1/config and status show; modes come from plan
	plan    nodePlan
	cs      kube.Client
	podCIDR netip.Prefix
	nodeUID types.UID // the Node's, for Events about it
	uplink  netlink.Link
	guard   *guardState
	loops   *loops
	log     *slog.Logger
	started time.Time
}

// prepare reads the Node (waiting for its PodCIDR) and the configuration, scans for
// user firewall rules and decides the plan.
func prepare(ctx context.Context, cfg Config, loops *loops, log *slog.Logger) (*startup, error) {
	s := &startup{cfg: cfg, loops: loops, log: log, started: time.Now()}
	cs, dyn, err := kubeClients(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	s.cs = cs
	if err := kube.StreamInitialLists(); err != nil { // before any informer starts
		log.Warn("informers list as before", "err", err)
	}
	node, err := waitForNode(ctx, cs, cfg.Node, log)
	if err != nil {
		return nil, err
	}
	s.nodeUID = node.UID
	s.podCIDR, err = netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil || !s.podCIDR.Addr().Is4() {
		return nil, fmt.Errorf("node %s has PodCIDR %q, which is not an IPv4 CIDR", cfg.Node, node.Spec.PodCIDR)
	}
	if s.conf, err = loadConfig(ctx, cs, dyn, node.Labels, log); err != nil {
		return nil, err
	}
	if err := checkPodCIDR(cfg.Node, s.podCIDR, s.conf); err != nil {
		return nil, err
	}
	if w := s.conf.Warning(); w != "" {
		log.Warn(w)
	}
	log.Info("configuration loaded", "sources", s.conf.SourceSummary())
	if d := memlimit.Apply(s.conf.MemoryLimit, log); d.Limit > 0 && d.Limit != math.MaxInt64 {
		log.Info("memory limit", "bytes", d.Limit, "reason", d.Reason)
	} else {
		log.Info("memory limit", "reason", d.Reason)
	}
	if err := checkRoutingMode(s.conf); err != nil {
		return nil, err
	}
	if s.guard, err = scanGuard(s.conf.UserIPTablesGuard); err != nil {
		return nil, err
	}
	if s.uplink, err = netlink.LinkByName(cfg.Uplink); err != nil {
		return nil, fmt.Errorf("uplink %q not found: %w; pass the node's uplink device with --uplink", cfg.Uplink, err)
	}
	if s.plan, err = planNode(cfg, s.conf, node, s.podCIDR, s.guard.atStart, s.uplink.Attrs().MTU); err != nil {
		return nil, err
	}
	log.Info("node plan decided", "routing", s.plan.RoutingMode(), "hostRouting", s.plan.HostRouting.Mode(),
		"reason", s.plan.HostRouting.Reason, "natPorts", s.plan.NATPorts, "mtu", s.plan.MTU, "routeMTU", s.plan.RouteMTU)
	// The hubble-tls-* files are read here as well as where the API starts, so a
	// missing or bad one stops the agent before the datapath is loaded: an upgrade
	// with a typo must not leave the node on new programs no agent syncs.
	if _, err := s.hubbleListen().creds(); err != nil {
		return nil, err
	}
	return s, nil
}

// checkPodCIDR refuses a node whose PodCIDR is not inside cluster-cidr. The
// datapath tells pods from everything else by cluster-cidr alone (masquerade,
// the Service stage, NetworkPolicy's peers, the agent's routes), so pods outside
// it would be masqueraded towards other pods and looked up as Services.
func checkPodCIDR(node string, podCIDR netip.Prefix, c config.Config) error {
	cluster := c.ClusterCIDR.Masked()
	if routing.Within(cluster, podCIDR) {
		return nil
	}
	return fmt.Errorf("node %s has PodCIDR %v, which is not inside cluster-cidr %v (set by %s): "+
		"set cluster-cidr to the range the PodCIDRs come from (kube-controller-manager --cluster-cidr)",
		node, podCIDR, cluster, c.Source("cluster-cidr"))
}

// local is this node as route and tunnel planning check the other Nodes against
// (routing.Peers).
func (s *startup) local() routing.Local {
	return routing.Local{Name: s.plan.Node, IP: s.plan.NodeIP, PodCIDR: s.podCIDR, ClusterCIDR: s.plan.ClusterCIDR}
}

// planNode gathers what decidePlan needs to know of the node besides its uplink's
// MTU (the kernel's features, its ephemeral ports) and decides the plan.
func planNode(cfg Config, conf config.Config, node *corev1.Node, podCIDR netip.Prefix, userRules []string, uplinkMTU int) (nodePlan, error) {
	ephemeral, err := readEphemeralPorts(ephemeralPortsFile)
	if err != nil {
		return nodePlan{}, err
	}
	p, err := decidePlan(conf, planInputs{Node: cfg.Node, NodeIP: k8s.NodeInternalIP(node), PodCIDR: podCIDR, Features: datapath.Probe(),
		UserRules: userRules, Ephemeral: ephemeral, UplinkMTU: uplinkMTU})
	if cfg.CgroupRoot != "" {
		p.CgroupRoot = cfg.CgroupRoot
	}
	return p, err
}

func kubeClients(kubeconfig string) (kube.Client, dynamic.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent = "myelin-agent"
	if rc.QPS == 0 && rc.RateLimiter == nil {
		// Unset, client-go allows 5 requests a second (burst 10) to each API group's
		// client, shared by the informers' lists and watches (re-opened every few
		// minutes, and all at once after an apiserver restart), the Node and
		// configuration reads and the Events (policyEventRate of them for policies).
		// 20/40 leaves those their headroom without queueing one behind another,
		// well under a kubelet's 50/100; the apiserver's priority and fairness
		// bounds what all nodes send together.
		rc.QPS, rc.Burst = 20, 40
	}
	// Protobuf decodes the initial lists of 10,000 Services and EndpointSlices several
	// times faster than JSON and with less garbage; the dynamic client (CRDs, which
	// have no protobuf) sets JSON for itself.
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kube.New(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	return cs, dyn, err
}

// loadConfig reads the configuration, retrying while the apiserver is unreachable.
func loadConfig(ctx context.Context, cs kube.Client, dyn dynamic.Interface, nodeLabels map[string]string, log *slog.Logger) (config.Config, error) {
	for attempt := 1; ; attempt++ {
		conf, err := config.Load(ctx, cs, dyn, nodeLabels)
		if err == nil || !isTransient(err) || attempt == 30 {
			return conf, err
		}
		log.Warn("waiting for the apiserver", "err", err)
		select {
		case <-ctx.Done():
			return config.Config{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// isTransient says whether err is worth retrying: the apiserver unreachable or
// overloaded. NotFound and Forbidden are not.
func isTransient(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, unix.EHOSTUNREACH) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// waitForNode waits until this node's Node object exists and the controller-manager
// has given it a PodCIDR.
func waitForNode(ctx context.Context, cs kube.Client, node string, log *slog.Logger) (*corev1.Node, error) {
	for {
		n, err := cs.GetNode(ctx, node)
		switch {
		case err != nil:
			log.Warn("waiting for the Node object", "node", node, "err", err)
		case n.Spec.PodCIDR == "":
			log.Info("waiting for the node's PodCIDR", "node", node)
		default:
			return n, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
