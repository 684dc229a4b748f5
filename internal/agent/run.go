package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/service"
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
	CNIVersion      string // cniVersion of the conflist ("" = 1.0.0)
	HealthPort      int    // /healthz and /readyz on 127.0.0.1 (0 = none)
	// PortmapSource is the upstream portmap plugin to install as PortmapPlugin and chain
	// after myelin-cni, for pods' hostPorts ("" = no hostPort support).
	PortmapSource string
	// MountBPFFS lets the agent mount a bpffs at BPFFSDir's parent when there is none
	// (an agent running on the host). In a pod a mount would stay in the container's
	// mount namespace and every restart would lose pins, so the chart turns it off and
	// a missing bpffs is an error (bpffs.go).
	MountBPFFS bool
	// CgroupRoot (--cgroup-root), when set, is where socket-LB attaches instead of
	// the cgroup-root key: node layout, like BPFFSDir (the lab gives each node its own).
	CgroupRoot string
}

func (c Config) socket() string { return api.Socket(c.StateDir) }

// Run is the agent's whole life, and its table of contents: claim the node (its state
// directory's lock, the health port), start the datapath GC,
// decide the node's plan, load the datapath, serve the API, start the control loops,
// install the CNI plugin, report ready, then serve until ctx ends. A configuration
// error stops it before it changes anything on the node but its state directory and
// that directory's lock.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	health, release, err := claimNode(cfg, log) // the state directory, liveness
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	loops := newLoops()
	// Garbage collection starts before anything waits for the apiserver, on the maps
	// the previous agent pinned, and never depends on the API.
	gc := startCollector(ctx, cfg.BPFFSDir, log, loops)
	defer func() { cancel(); gc.wait() }()
	st, err := prepare(ctx, cfg, loops, log) // the Node, the configuration, the plan
	if err != nil {
		return err
	}
	st.reportFallbacks(ctx)                 // log and Events (events.go)
	mets, err := startMetrics(st.conf, log) // :9962 and :9965 (metrics.go)
	if err != nil {
		return err
	}
	defer mets.close()
	nodes := newNodeWatch(st.cs)
	svcWatch := st.prestartServices(ctx) // lists download while BPF loads (services.go)
	node, err := st.startDatapath(ctx, nodes)
	if err != nil {
		st.datapathFailed(ctx, err, mets)
		return err
	}
	gc.use(node.dp)
	flows := st.startFlows(node) // node.flows: the flow store (flows.go)
	// Pins stay: the datapath keeps forwarding while no agent runs. The GC loop ends
	// before the datapath it uses is closed.
	defer func() { cancel(); gc.wait(); node.dp.Close() }()

	deleted := &deletedLoop{socket: cfg.socket(), eps: node.eps, loops: loops, log: log}
	deleted.carryOut() // before anything new is added
	srv, httpSrv, err := st.serveAPI(ctx, node, gc, health)
	if err != nil {
		return err
	}
	defer httpSrv.Close()
	svc, err := st.startLoops(ctx, parts{nodes: nodes, svcWatch: svcWatch, node: node, srv: srv, deleted: deleted, mets: mets, gc: gc, flows: flows})
	if err != nil {
		return err
	}
	if err := installCNI(cfg); err != nil {
		return err
	}
	if !srv.becomeReady(ctx, svc.synced()) {
		return nil
	}
	log.Info("agent ready", "podCIDR", st.podCIDR, "socket", cfg.socket(),
		"took", time.Since(st.started).Round(time.Millisecond))
	<-ctx.Done()
	return nil
}

// claimNode takes what one agent of a node holds, before anything else: its state
// directory's lock (lockStateDir: one agent per directory) and the health port
// (liveness from the first moment). release gives both back.
func claimNode(cfg Config, log *slog.Logger) (health *healthServer, release func(), err error) {
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, nil, err
	}
	if health, err = startHealth(cfg.HealthPort, log); err != nil {
		lock.Release(false)
		return nil, nil, err
	}
	return health, func() { health.close(); lock.Release(false) }, nil
}

// datapathFailed counts a failed BPF load and reports that the datapath could not
// be loaded or attached (events.go).
func (st *startup) datapathFailed(ctx context.Context, err error, mets *agentMetrics) {
	if errors.Is(err, errBPFLoad) {
		mets.agent.LoadFailed()
	}
	st.reportDatapathFailure(ctx, err)
}

// serveAPI serves the local API on the agent's socket, showing the views known so
// far, and the Hubble Observer API (hubble.go); /readyz follows the local API's
// readiness from here on. The caller closes the returned http.Server.
func (st *startup) serveAPI(ctx context.Context, node *nodeDatapath, gc *collector, health *healthServer) (*server, *http.Server, error) {
	srv := newServer(st.cfg, node, st.log)
	srv.views.add(st.views(node, gc)...)
	health.use(srv)
	httpSrv, err := srv.serve()
	if err != nil {
		return nil, nil, err
	}
	if err := serveHubble(ctx, st.cfg, st.hubbleListen(), node.flows, st.log); err != nil {
		httpSrv.Close()
		return nil, nil, err
	}
	return srv, httpSrv, nil
}

// hubbleListen is where and how the node serves the Hubble Observer API.
func (st *startup) hubbleListen() hubbleListen {
	return hubbleListen{Addr: st.conf.HubbleListenAddress, NodeIP: st.plan.NodeIP,
		TLS: hubble.ServerTLS{CertFile: st.conf.HubbleTLSCertFile, KeyFile: st.conf.HubbleTLSKeyFile,
			ClientCAFiles: st.conf.HubbleTLSClientCAFiles, ClientNames: st.conf.HubbleTLSClientNames}}
}

// parts are what Run has started by the time the control loops start.
type parts struct {
	nodes    *nodeWatch
	svcWatch *service.Watcher // prestarted before the datapath loads
	node     *nodeDatapath
	srv      *server
	deleted  *deletedLoop
	mets     *agentMetrics
	gc       *collector
	flows    *flowLoop
}

// startLoops creates the Service and NetworkPolicy loops and node health probing,
// registers their API views and metrics, and supervises every control loop. The
// Service loop is nil without kube-proxy replacement.
func (st *startup) startLoops(ctx context.Context, p parts) (*serviceLoop, error) {
	var svcDP service.Datapath = p.node.dp
	var closer *udpCloser
	if p.node.socketLB.active {
		closer = newUDPCloser(p.node.dp, p.node.eps, st.log.With("loop", "udp-closer"))
		svcDP = closer
		supervise(ctx, closer)
	}
	svc, err := newServiceLoop(st.plan, svcDP, p.svcWatch, st.loops, st.log)
	if err != nil {
		return nil, err
	}
	if svc != nil {
		p.srv.views.add(svc) // /v1/services answers from here on
		// Backends that leave a Service while another keeps them: the GC ends the
		// Service's flows to them, the closer its connected UDP sockets.
		p.gc.useServices(svc.manager)
		if closer != nil {
			svc.manager.OnDeparture(closer.departed)
			// Closes no queue remembers (still queued when the last agent
			// stopped, past its bound): one sweep once the maps say exactly
			// what the cluster does.
			svc.watcher.OnPruned(closer.sweep)
		}
	}
	pol, err := newPolicyLoop(st.cfg.Node, st.cfg.StateDir, p.node.dp, st.cs, p.node.eps.List, st.loops, st.log)
	if err != nil {
		return nil, err
	}
	pol.ranges = newPodRanges(p.nodes, st.local(), st.log)
	pol.overBudget = p.node.dp.PodsOverBudget
	pol.evicted = func() (uint64, error) { return p.gc.policyCTEvicted(p.node.dp) }
	pol.seeder = &policySeeder{sockets: podConnections, seed: p.node.dp.SeedPolicyCT, ran: pol.admitted,
		perPod: st.plan.PolicyCTPodMax, tableSize: st.plan.PolicyCTMax, overBudget: p.node.dp.PodsOverBudget, log: st.log}
	// IPAM passes over the addresses Pods being deleted still list (podclaims.go).
	p.node.eps.UseAddressClaims(pol.claims.claimed)
	p.srv.views.add(pol) // /v1/policy answers from here on
	names := pol.podName
	p.srv.monitor.names.Store(&names)               // pods of other nodes in drop events
	p.mets.use(st, p.node, svc, pol, p.gc, p.flows) // before the Service watcher runs
	p.flows.resolveWith(pol, svc)
	receivers := st.overlayReceivers(p.node.dp, p.nodes)
	supervise(ctx, append(st.loopsFor(p.nodes, p.node, svc, p.srv, p.deleted, receivers), pol, p.flows)...)
	if ph := st.newPeerHealth(p.nodes, receivers); ph != nil {
		p.srv.views.add(ph) // /v1/health answers from here on
		p.mets.health.Store(ph)
		supervise(ctx, ph)
	}
	return svc, nil
}

// runner is one control loop: it owns its state and runs until ctx ends.
type runner interface{ Run(ctx context.Context) }

// supervise starts each loop in its own goroutine; they end with ctx.
func supervise(ctx context.Context, rs ...runner) {
	for _, r := range rs {
		go r.Run(ctx)
	}
}

// views are the parts the API shows from the start: the plan and configuration,
// the loops' runs, the firewall guard, the datapath and, with kube-proxy serving
// Services, that.
func (s *startup) views(node *nodeDatapath, gc *collector) []view {
	vs := []view{nodeView{node: s.cfg.Node, uplink: s.cfg.Uplink, conf: s.conf, plan: s.plan, started: s.started},
		s.loops, s.guard, datapathView{dp: node.dp, plan: s.plan, gc: gc, names: node.eps.PodByIP}, node.socketLB}
	if !s.plan.KubeProxyReplacement {
		vs = append(vs, kubeProxyServices{node: s.cfg.Node})
	}
	return vs
}

// loopsFor lists the control loops this node's plan needs: the Node informer and
// what follows Nodes (masquerade, then node routes or tunnels), the apiserver's
// reachability, the firewall guard, recorded CNI deletes, datapath events for
// monitor clients, the deleted pods' veths, the restored endpoints left to
// program again, the node's addresses (NetworkPolicy's
// host exemption), and the Services with kube-proxy-replacement. The loops that
// report on themselves register their views with srv.
func (s *startup) loopsFor(nodes *nodeWatch, node *nodeDatapath, svc *serviceLoop, srv *server, deleted *deletedLoop,
	receivers *overlayReceivers) []runner {
	routes, kube := &routeStatus{}, &kubeLoop{cs: s.cs, loops: s.loops}
	srv.views.add(routes, kube)
	rs := []runner{nodes, node.masq}
	if s.plan.Tunnel {
		rs = append(rs, newTunnelLoop(s.plan, s.local(), node.dp, node.overlay, nodes, receivers, routes, s.loops, s.log))
	} else {
		rs = append(rs, newNodeRoutesLoop(s.plan, s.local(), s.cfg.Uplink, nodes, routes, s.loops, s.log))
	}
	rs = append(rs, kube, newGuardLoop(s.guard, s.plan, s.nodeUID, s.cs, s.loops, s.log), deleted, srv.monitor,
		vethReaper{reaper: node.eps.Reaper(), loops: s.loops, log: s.log},
		adoptionLoop{eps: node.eps, interval: adoptionInterval, loops: s.loops, log: s.log},
		newHostAddrLoop(node.dp.SetHostAddresses, s.plan.NodeIP, nodes.kick, s.loops, s.log))
	if svc != nil {
		rs = append(rs, svc)
	}
	return rs
}
