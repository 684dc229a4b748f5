package metrics

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/connlimit"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric of the agent.
const Namespace = "myelin"

// Agent is the agent's metric registry: the scrape-time collector of Snapshots,
// the few event-time metrics, and the Go runtime and process collectors.
type Agent struct {
	reg         *prometheus.Registry
	state       atomic.Pointer[func() Snapshot]
	syncLatency *prometheus.HistogramVec
	loadErrors  prometheus.Counter
}

// NewAgent returns a registry with nothing to report from the datapath until Use.
func NewAgent() *Agent {
	a := &Agent{reg: prometheus.NewRegistry()}
	a.syncLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "api_sync_latency_seconds",
		Help: "Time from a Kubernetes informer event to the datapath written for it, by resource (services: Service and EndpointSlice events to the Service maps).",
		// 1 ms .. ~16 s: a quiet agent writes in milliseconds, a burst of
		// thousands of Services queues for seconds.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"resource"})
	a.loadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "bpf_load_errors_total",
		Help: "BPF datapath loads that failed in this agent process (a failed load stops the agent; see its log and Node events).",
	})
	refused := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace, Name: "server_connections_refused_total",
		Help: "TCP connections to the agent's servers (metrics, Hubble, node health, health check ports) closed at once because their source address, or all sources together, held the most the agent keeps open (internal/connlimit).",
	}, func() float64 { return float64(connlimit.Refused()) })
	a.reg.MustRegister(a.syncLatency, a.loadErrors, refused, &snapshotCollector{a: a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return a
}

// Registry is what the HTTP handler serves.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Use makes every scrape from now on report what state returns. state must be
// safe to call from any goroutine.
func (a *Agent) Use(state func() Snapshot) { a.state.Store(&state) }

// ObserveSync records that an informer event for resource took d to reach the datapath.
func (a *Agent) ObserveSync(resource string, d time.Duration) {
	a.syncLatency.WithLabelValues(resource).Observe(d.Seconds())
}

// LoadFailed counts a failed datapath load.
func (a *Agent) LoadFailed() { a.loadErrors.Inc() }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// The scrape-time metrics. Label values are bounded: map names and kinds are the
// datapath's fixed set, reasons and directions its enums, controllers and GC
// tables the agent's fixed loops.
var (
	endpointsDesc    = desc("endpoints", "Pods whose endpoint is programmed in this node's datapath.")
	ipamUsedDesc     = desc("ipam_addresses_used", "Pod addresses in use from this node's PodCIDR.")
	ipamTotalDesc    = desc("ipam_addresses_capacity", "Pod addresses this node's PodCIDR can hand out.")
	retiredDesc      = desc("retired_veths", "Host veths of deleted pods (down, no endpoint) waiting for the agent's veth-reaper to delete them, failed deletes waiting for their retry included; one that stays is a delete that keeps failing (agent log).")
	servicesDesc     = desc("services", "Kubernetes Services programmed in the datapath (kube-proxy replacement).")
	frontendsDesc    = desc("service_frontends", "Service frontends (address, port, protocol) programmed in the datapath.")
	backendsDesc     = desc("service_backends", "Service backends programmed in the datapath.")
	mapEntriesDesc   = desc("bpf_map_entries", "Entries in a BPF map the agent owns, counted at most 5 s before the scrape.", "map", "kind")
	mapCapDesc       = desc("bpf_map_capacity", "Maximum entries of a BPF map the agent owns.", "map", "kind")
	mapPressureDesc  = desc("bpf_map_pressure", "Fill ratio (entries / capacity, 0..1) of a BPF map the agent owns; near 1 new entries fail or evict others.", "map", "kind")
	mapErrorsDesc    = desc("bpf_map_read_errors_total", "Counts of a BPF map the agent owns that failed (agent log); its bpf_map_* series keep the last full count.", "map", "kind")
	mapFailingDesc   = desc("bpf_map_read_failing", "1 when the last count of a BPF map the agent owns failed: its bpf_map_entries is the last full count, or before any, a partial count.", "map", "kind")
	ctEntriesDesc    = desc("conntrack_entries", "Connection tracking entries, by table (BPF map).", "table")
	natEntriesDesc   = desc("nat_entries", "NAT entries (two per translated flow), by table (BPF map).", "table")
	dropPktsDesc     = desc("drop_count_total", "Packets the datapath dropped, by reason and direction (the program that dropped them).", "reason", "direction")
	dropBytesDesc    = desc("drop_bytes_total", "Bytes of the packets the datapath dropped, by reason and direction.", "reason", "direction")
	fwdPktsDesc      = desc("forward_count_total", "Packets the datapath forwarded, by direction and path (bpf: redirected by BPF; stack: handed to the kernel stack).", "direction", "path")
	fwdBytesDesc     = desc("forward_bytes_total", "Bytes of the packets the datapath forwarded, by direction and path.", "direction", "path")
	eventsLostDesc   = desc("datapath_events_lost_total", "Datapath events (drops, traces) lost because the ring buffer was full, by direction.", "direction")
	flowsLostDesc    = desc("flows_lost_total", "Flow records lost because the flow ring buffer was full (the packets went on), by direction.", "direction")
	flowsLimitedDesc = desc("flows_limited_total", "Flow records (DNS, drops) not written because the pod's per-window budget was used up (a flood; the packets went on), by direction.", "direction")
	plainPodDesc     = desc("tunnel_plain_pod_to_node_total", "Packets from a pod address to this node's IP that arrived plain on the uplink while tunnel-pod-to-node is encapsulate (a node that does not encapsulate them yet, or a forger); they went on. Zero on every node before enforce.")
	pctEvictDesc     = desc("policy_ct_evictions_total", "NetworkPolicy connections a new one pushed out of myelin_policy_ct (both of its buckets full), by kind (idle: no packet since their buckets last made room; in-use: live connections, whose next packets are judged again).", "kind")
	icmpSuppDesc     = desc("icmp_rejects_suppressed_total", "Service rejects (no backend) left unanswered because the ICMP rate limit was reached.")
	attachErrDesc    = desc("bpf_attach_errors_total", "BPF program attachments (uplink, VXLAN device, pod veths) that failed since the datapath loaded.")
	loadedDesc       = desc("datapath_loaded", "1 once the BPF datapath is loaded and attached to the uplink, else 0.")
	hostRoutingDesc  = desc("host_routing_mode", "The node's host routing mode (bpf or legacy) with the reason for a fallback; the series of the mode in use is 1.", "mode", "reason")
	routingDesc      = desc("routing_mode", "The node's routing mode between nodes (native or tunnel); the series of the mode in use is 1.", "mode")
	ctrlRunsDesc     = desc("controller_runs_total", "Runs of an agent control loop (GC, Services, routes, guard ...).", "controller")
	ctrlErrsDesc     = desc("controller_errors_total", "Runs of an agent control loop that ended in an error.", "controller")
	ctrlFailDesc     = desc("controller_failing", "1 when the last run of an agent control loop ended in an error.", "controller")
	gcRunsDesc       = desc("datapath_gc_runs_total", "Garbage collection passes over a datapath table (nat: masquerade, nodeport-nat: NodePort SNAT, service-ct: Service conntrack, policy-ct: NetworkPolicy connections).", "table")
	gcRemovedDesc    = desc("datapath_gc_entries_removed_total", "Entries garbage collection removed from a datapath table.", "table")
	polEventsDesc    = desc("policy_events_total", "PolicyNotEnforced Events this agent sent about NetworkPolicies it cannot enforce as written, by result (posted; refused: the apiserver said no, not retried; failed: a timeout or server error, queued again; superseded: not posted, the policy was fixed or changed while it waited, or queued again).", "result")
	verdictSkipDesc  = desc("flow_policy_verdicts_skipped_total", "FORWARDED policy verdict flows sent without the policies that allow them: the agent's budget for policy evaluations (50 ms a second) was spent, as when a pod opens connections to ever new ports.")
	polWaitingDesc   = desc("policy_events_waiting", "PolicyNotEnforced Events the last policy computation could not queue (a flood of broken policies; posted at 1/s); they wait for a later computation.")
	// The node health matrix (internal/clusterhealth names them): one series per
	// peer node and path, (nodes - 1) x 3 per agent.
	healthStatusDesc  = prometheus.NewDesc(clusterhealth.StatusMetric, clusterhealth.StatusMetricHelp, clusterhealth.MetricLabels, nil)
	healthLatencyDesc = prometheus.NewDesc(clusterhealth.LatencyMetric, clusterhealth.LatencyMetricHelp, clusterhealth.MetricLabels, nil)
)

var allDescs = []*prometheus.Desc{endpointsDesc, retiredDesc, ipamUsedDesc, ipamTotalDesc, servicesDesc, frontendsDesc,
	backendsDesc, mapEntriesDesc, mapCapDesc, mapPressureDesc, mapErrorsDesc, mapFailingDesc, ctEntriesDesc, natEntriesDesc, dropPktsDesc,
	dropBytesDesc, fwdPktsDesc, fwdBytesDesc, eventsLostDesc, flowsLostDesc, flowsLimitedDesc, plainPodDesc, pctEvictDesc, icmpSuppDesc, attachErrDesc, loadedDesc,
	hostRoutingDesc, routingDesc, ctrlRunsDesc, ctrlErrsDesc, ctrlFailDesc, gcRunsDesc, gcRemovedDesc,
	polEventsDesc, polWaitingDesc, verdictSkipDesc, healthStatusDesc, healthLatencyDesc}

// snapshotCollector turns the Snapshot of each scrape into metrics.
type snapshotCollector struct{ a *Agent }

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.a.state.Load()
	if f == nil {
		ch <- gauge(loadedDesc, 0)
		return
	}
	s := (*f)()
	collectState(ch, s)
	collectMaps(ch, s)
	collectCounters(ch, s)
	collectControllers(ch, s)
	collectHealth(ch, s)
}

// collectHealth reports the node health matrix.
func collectHealth(ch chan<- prometheus.Metric, s Snapshot) {
	for _, h := range s.NodeHealth {
		d := healthStatusDesc
		if h.Metric == clusterhealth.LatencyMetric {
			d = healthLatencyDesc
		}
		ch <- gauge(d, h.Value, h.Peer, h.Path)
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectState reports the node's modes, endpoints, addresses and Services.
func collectState(ch chan<- prometheus.Metric, s Snapshot) {
	ch <- gauge(loadedDesc, boolValue(s.Datapath))
	if s.HostRouting != "" {
		ch <- gauge(hostRoutingDesc, 1, strings.ToLower(s.HostRouting), s.HostRoutingReason)
	}
	if s.RoutingMode != "" {
		ch <- gauge(routingDesc, 1, s.RoutingMode)
	}
	if !s.Datapath {
		return
	}
	ch <- gauge(endpointsDesc, float64(s.Endpoints))
	ch <- gauge(retiredDesc, float64(s.RetiredVeths))
	ch <- gauge(ipamUsedDesc, float64(s.IPAMUsed))
	ch <- gauge(ipamTotalDesc, float64(s.IPAMTotal))
	ch <- counter(attachErrDesc, s.AttachErrors)
	ch <- counter(icmpSuppDesc, s.ICMPRejectsSuppressed)
	if e := s.PolicyCTEvictions; e != nil {
		ch <- counter(pctEvictDesc, e.Idle, "idle")
		ch <- counter(pctEvictDesc, e.InUse, "in-use")
	}
	ch <- counter(verdictSkipDesc, s.FlowVerdictsSkipped)
	if s.Services != nil {
		ch <- gauge(servicesDesc, float64(s.Services.Services))
		ch <- gauge(frontendsDesc, float64(s.Services.Frontends))
		ch <- gauge(backendsDesc, float64(s.Services.Backends))
	}
	if e := s.PolicyEvents; e != nil {
		ch <- counter(polEventsDesc, e.Posted, "posted")
		ch <- counter(polEventsDesc, e.Refused, "refused")
		ch <- counter(polEventsDesc, e.Failed, "failed")
		ch <- counter(polEventsDesc, e.Superseded, "superseded")
		ch <- gauge(polWaitingDesc, float64(e.Waiting))
	}
}
