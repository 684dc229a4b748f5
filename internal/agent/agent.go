package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/healthcheck"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/iptables"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/service"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// Config is the agent's bootstrap configuration: where things are on this node. The
// networking configuration comes from Kubernetes (package config).
type Config struct {
	Node            string
	Kubeconfig      string // "" = in-cluster
	StateDir        string // endpoint records, IPAM state, the API socket
	BPFFSDir        string // pinned maps and links
	CNIBinDir       string
	CNIConfDir      string
	CNIPluginSource string // the myelin-cni binary to install
	Uplink          string // the node's uplink device
}

func (c Config) socket() string { return api.Socket(c.StateDir) }

// agent is one running agent's state, shared by its loops and API handlers.
type agent struct {
	cfg     Config
	conf    config.Config
	log     *slog.Logger
	cs      kubernetes.Interface
	dp      *datapath.Datapath
	eps     *endpoint.Manager
	pool    *ipam.Pool
	plan    nodePlan // the node's modes, decided once at start
	loops   *loops
	monitor *monitor
	guard   *guardState
	// masqApplied is the no-masquerade set last written (nil: none yet); only the
	// start-up and then the node loop touch it, one after the other.
	masqApplied []netip.Prefix
	overlay     netlink.Link     // myelin_vxlan in tunnel mode
	gc          *collector       // the datapath GC (NAT, NodePort SNAT, Service conntrack)
	services    *service.Manager // nil with kube-proxy-replacement false
	svcWatch    *service.Watcher
	// healthChecks serves healthCheckNodePorts; nil with kube-proxy-replacement false.
	healthChecks *healthcheck.Server
	started      time.Time

	ready      atomic.Bool
	notReady   atomic.Pointer[string] // what the agent waits for before it is ready
	nodesKnown atomic.Int32
	routes     atomic.Int32
	unroutable atomic.Pointer[[]string]
	k8sVersion atomic.Pointer[string]
}

// Run is the agent's whole life: start-up in order, then serve until ctx ends. A
// configuration error stops it before it changes anything on the node.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	// Garbage collection starts before anything waits for the apiserver, on the maps
	// the previous agent pinned, and never depends on the API.
	loops := newLoops()
	gc := startCollector(ctx, cfg.BPFFSDir, log, loops)
	defer func() { cancel(); gc.wait() }()
	cs, dyn, err := kubeClients(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	node, err := waitForNode(ctx, cs, cfg.Node, log)
	if err != nil {
		return err
	}
	podCIDR, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil || !podCIDR.Addr().Is4() {
		return fmt.Errorf("node %s has PodCIDR %q, which is not an IPv4 CIDR", cfg.Node, node.Spec.PodCIDR)
	}
	conf, err := loadConfig(ctx, cs, dyn, node.Labels, log)
	if err != nil {
		return err
	}
	if w := conf.Warning(); w != "" {
		log.Warn(w)
	}
	log.Info("configuration loaded", "sources", conf.SourceSummary())
	if err := checkRoutingMode(conf); err != nil {
		return err
	}
	guarded, err := scanGuard(conf.UserIPTablesGuard)
	if err != nil {
		return err
	}
	plan, err := planNode(cfg, conf, node, guarded.atStart)
	if err != nil {
		return err
	}
	log.Info("node plan decided", "routing", plan.RoutingMode(), "hostRouting", plan.HostRouting.Mode(),
		"reason", plan.HostRouting.Reason, "natPorts", plan.NATPorts, "mtu", plan.MTU, "routeMTU", plan.RouteMTU)
	uplink, err := netlink.LinkByName(cfg.Uplink)
	if err != nil {
		return fmt.Errorf("uplink %q not found: %w; pass the node's uplink device with --uplink", cfg.Uplink, err)
	}
	a := &agent{cfg: cfg, conf: conf, log: log, cs: cs, plan: plan,
		loops: loops, guard: guarded, gc: gc, started: time.Now()}
	if err := a.startDatapath(podCIDR, uplink); err != nil {
		return err
	}
	gc.use(a.dp)
	// Pins stay: the datapath keeps forwarding while no agent runs. The GC loop ends
	// before the datapath it uses is closed.
	defer func() { cancel(); gc.wait(); a.dp.Close() }()

	a.carryOutDeleted() // before anything new is added
	srv, err := a.serve()
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := a.startServices(ctx); err != nil {
		return err
	}
	go a.watchNodes(ctx)
	go a.watchKubernetes(ctx)
	go a.watchGuard(ctx)
	go a.watchDeleted(ctx)
	go a.monitor.run(ctx)
	if err := installCNI(cfg); err != nil {
		return err
	}
	if !a.becomeReady(ctx, a.servicesSynced()) {
		return nil
	}
	log.Info("agent ready", "node", cfg.Node, "podCIDR", podCIDR, "socket", cfg.socket())
	<-ctx.Done()
	return nil
}

// startDatapath opens IPAM, loads and attaches BPF, sets up legacy forwarding when
// needed, and adopts existing endpoints.
func (a *agent) startDatapath(podCIDR netip.Prefix, uplink netlink.Link) error {
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return err
	}
	if err := ensureBPFFS(); err != nil {
		return err
	}
	pool, err := ipam.OpenPool(filepath.Join(a.cfg.StateDir, "ipam.json"), podCIDR)
	if err != nil {
		return err
	}
	// Going to legacy, the stack must accept forwarded pod traffic before the programs
	// start handing packets to it; going to BPF, the rules go only after every program
	// has been replaced. Either way no packet meets a half-switched node.
	if !a.plan.HostRouting.BPF {
		if err := iptables.EnsureForward(a.plan.ClusterCIDR); err != nil {
			return err
		}
	}
	dpCfg := a.plan.datapathConfig(a.cfg.BPFFSDir)
	if !a.plan.SourceValidation {
		a.log.Warn("source IP verification is OFF: pods can send from any address and MAC, other pods', nodes' and Services' included; "+
			"turn it off only to measure its cost", "key", "enable-source-ip-verification", "source", a.conf.Source("enable-source-ip-verification"))
	}
	if a.plan.Tunnel {
		dev, err := tunnel.EnsureDevice(int(a.plan.TunnelPort), a.plan.MTU, datapath.OverlayMAC(a.plan.NodeIP))
		if err != nil {
			return err
		}
		a.overlay, dpCfg.Tunnel, dpCfg.OverlayIfIndex = dev, true, dev.Attrs().Index
		dpCfg.OverlayMAC = datapath.OverlayMAC(a.plan.NodeIP)
	} else if err := tunnel.RemoveDevice(); err != nil {
		return fmt.Errorf("remove %s (native routing needs none): %w", tunnel.DeviceName, err)
	}
	dp, err := datapath.Load(dpCfg)
	if err != nil {
		return fmt.Errorf("load the BPF datapath: %w", err)
	}
	// The no-masquerade set must be complete before the egress program runs, or
	// traffic between pods and nodes would be translated.
	if err := a.startMasquerade(dp); err != nil {
		dp.Close()
		return err
	}
	if err := dp.AttachNetdev(uplink.Attrs().Index, uplink.Attrs().Name); err != nil {
		dp.Close()
		return fmt.Errorf("attach to uplink %s: %w", uplink.Attrs().Name, err)
	}
	if err := dp.AttachToNetdev(uplink.Attrs().Index, uplink.Attrs().Name); err != nil {
		dp.Close()
		return fmt.Errorf("attach to uplink %s egress: %w", uplink.Attrs().Name, err)
	}
	if a.overlay != nil {
		if err := dp.AttachOverlay(a.overlay.Attrs().Index, tunnel.DeviceName); err != nil {
			dp.Close()
			return fmt.Errorf("attach to %s: %w", tunnel.DeviceName, err)
		}
	}
	a.pool, a.dp = pool, dp
	a.eps = endpoint.NewManager(endpoint.Config{Dir: filepath.Join(a.cfg.StateDir, "endpoints"), Node: a.cfg.Node,
		MTU: a.plan.MTU, RouteMTU: a.plan.RouteMTU}, dp, routing.Kernel{}, pool)
	adopted, removed, err := a.eps.Restore()
	a.loops.report("endpoint-restore", err)
	a.log.Info("endpoints restored", "adopted", adopted, "removed", removed, "err", err)
	if a.plan.HostRouting.BPF {
		if err := iptables.RemoveForward(); err != nil {
			return err
		}
	}
	a.monitor = newMonitor(dp, a.eps, a.log)
	return nil
}

// planNode gathers what decidePlan needs to know of the node (the kernel's features,
// its ephemeral ports, the uplink's MTU) and decides the plan.
func planNode(cfg Config, conf config.Config, node *corev1.Node, userRules []string) (nodePlan, error) {
	ephemeral, err := readEphemeralPorts(ephemeralPortsFile)
	if err != nil {
		return nodePlan{}, err
	}
	uplink, err := netlink.LinkByName(cfg.Uplink)
	if err != nil {
		return nodePlan{}, fmt.Errorf("uplink %q not found: %w; pass the node's uplink device with --uplink", cfg.Uplink, err)
	}
	return decidePlan(conf, planInputs{Node: cfg.Node, NodeIP: k8s.NodeInternalIP(node), Features: datapath.Probe(),
		UserRules: userRules, Ephemeral: ephemeral, UplinkMTU: uplink.Attrs().MTU})
}

// ensureBPFFS mounts the BPF filesystem at /sys/fs/bpf if it is not mounted yet.
func ensureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll("/sys/fs/bpf", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("bpffs", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
		return fmt.Errorf("mount the BPF filesystem at /sys/fs/bpf: %w", err)
	}
	return nil
}

func kubeClients(kubeconfig string) (kubernetes.Interface, dynamic.Interface, error) {
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
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	return cs, dyn, err
}

// loadConfig reads the configuration, retrying while the apiserver is unreachable.
func loadConfig(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, nodeLabels map[string]string, log *slog.Logger) (config.Config, error) {
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
func waitForNode(ctx context.Context, cs kubernetes.Interface, node string, log *slog.Logger) (*corev1.Node, error) {
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
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
