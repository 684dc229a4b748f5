package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/datapath"
)

func knownSnapshot() Snapshot {
	return Snapshot{
		Datapath: true, Endpoints: 3, RetiredVeths: 2, IPAMUsed: 3, IPAMTotal: 254,
		Services: &ServiceCounts{Services: 2, Frontends: 4, Backends: 5},
		Maps: []MapSample{
			{MapStat: datapath.MapStat{Name: "myelin_endpoints", Kind: datapath.MapKindEndpoints, Entries: 3, Max: 1024}},
			{MapStat: datapath.MapStat{Name: "myelin_snat", Kind: datapath.MapKindNAT, Entries: 512, Max: 1024}, ReadErrors: 2, Failing: true},
			{MapStat: datapath.MapStat{Name: "myelin_lb_ct", Kind: datapath.MapKindConntrack, Entries: 10, Max: 0}},
		},
		Counters: []datapath.Metric{
			{Direction: "from-pod", Reason: "FORWARDED", Packets: 10, Bytes: 1000},
			{Direction: "from-pod", Reason: "PASS_STACK", Packets: 2, Bytes: 200},
			{Direction: "to-pod", Reason: "DROP_POLICY_DENIED", Packets: 4, Bytes: 240},
			{Direction: "from-pod", Reason: "REASON_77", Packets: 1, Bytes: 60},
			{Direction: "from-netdev", Reason: "EVENTS_LOST", Packets: 5},
			{Direction: "to-pod", Reason: "FLOWS_LOST", Packets: 2},
			{Direction: "from-pod", Reason: "FLOWS_LIMITED", Packets: 7},
			{Direction: "from-netdev", Reason: "PLAIN_POD_TO_NODE", Packets: 3, Bytes: 180},
		},
		RoutingMode: "native", HostRouting: "BPF",
		Controllers:         []Controller{{Name: "services", Runs: 7, Errors: 1, Failing: true}},
		GC:                  []GCStat{{Table: "nat", Runs: 3, Removed: 9}},
		PolicyEvents:        &PolicyEventCounts{Posted: 6, Refused: 2, Failed: 1, Superseded: 3, Waiting: 40},
		FlowVerdictsSkipped: 11,
		PolicyCTEvictions:   &datapath.PolicyCTEvictions{Idle: 12, InUse: 3},
		NodeHealth: []clusterhealth.Sample{
			{Metric: clusterhealth.StatusMetric, Peer: "node-2", Path: "icmp", Value: 1},
			{Metric: clusterhealth.LatencyMetric, Peer: "node-2", Path: "icmp", Value: 0.0004},
			{Metric: clusterhealth.StatusMetric, Peer: "node-2", Path: "pod-http", Value: 0},
		},
	}
}

func TestAgentReportsSnapshot(t *testing.T) {
	a := NewAgent()
	a.Use(knownSnapshot)
	want := `
# HELP myelin_endpoints Pods whose endpoint is programmed in this node's datapath.
# TYPE myelin_endpoints gauge
myelin_endpoints 3
# HELP myelin_retired_veths Host veths of deleted pods (down, no endpoint) waiting for the agent's veth-reaper to delete them, failed deletes waiting for their retry included; one that stays is a delete that keeps failing (agent log).
# TYPE myelin_retired_veths gauge
myelin_retired_veths 2
# HELP myelin_service_backends Service backends programmed in the datapath.
# TYPE myelin_service_backends gauge
myelin_service_backends 5
# HELP myelin_bpf_map_pressure Fill ratio (entries / capacity, 0..1) of a BPF map the agent owns; near 1 new entries fail or evict others.
# TYPE myelin_bpf_map_pressure gauge
myelin_bpf_map_pressure{kind="conntrack",map="myelin_lb_ct"} 0
myelin_bpf_map_pressure{kind="endpoints",map="myelin_endpoints"} 0.0029296875
myelin_bpf_map_pressure{kind="nat",map="myelin_snat"} 0.5
# HELP myelin_bpf_map_read_errors_total Counts of a BPF map the agent owns that failed (agent log); its bpf_map_* series keep the last full count.
# TYPE myelin_bpf_map_read_errors_total counter
myelin_bpf_map_read_errors_total{kind="conntrack",map="myelin_lb_ct"} 0
myelin_bpf_map_read_errors_total{kind="endpoints",map="myelin_endpoints"} 0
myelin_bpf_map_read_errors_total{kind="nat",map="myelin_snat"} 2
# HELP myelin_bpf_map_read_failing 1 when the last count of a BPF map the agent owns failed: its bpf_map_entries is the last full count, or before any, a partial count.
# TYPE myelin_bpf_map_read_failing gauge
myelin_bpf_map_read_failing{kind="conntrack",map="myelin_lb_ct"} 0
myelin_bpf_map_read_failing{kind="endpoints",map="myelin_endpoints"} 0
myelin_bpf_map_read_failing{kind="nat",map="myelin_snat"} 1
# HELP myelin_nat_entries NAT entries (two per translated flow), by table (BPF map).
# TYPE myelin_nat_entries gauge
myelin_nat_entries{table="myelin_snat"} 512
# HELP myelin_conntrack_entries Connection tracking entries, by table (BPF map).
# TYPE myelin_conntrack_entries gauge
myelin_conntrack_entries{table="myelin_lb_ct"} 10
# HELP myelin_drop_count_total Packets the datapath dropped, by reason and direction (the program that dropped them).
# TYPE myelin_drop_count_total counter
myelin_drop_count_total{direction="from-pod",reason="DROP_REASON_77"} 1
myelin_drop_count_total{direction="to-pod",reason="DROP_POLICY_DENIED"} 4
# HELP myelin_forward_bytes_total Bytes of the packets the datapath forwarded, by direction and path.
# TYPE myelin_forward_bytes_total counter
myelin_forward_bytes_total{direction="from-pod",path="bpf"} 1000
myelin_forward_bytes_total{direction="from-pod",path="stack"} 200
# HELP myelin_datapath_events_lost_total Datapath events (drops, traces) lost because the ring buffer was full, by direction.
# TYPE myelin_datapath_events_lost_total counter
myelin_datapath_events_lost_total{direction="from-netdev"} 5
# HELP myelin_flows_lost_total Flow records lost because the flow ring buffer was full (the packets went on), by direction.
# TYPE myelin_flows_lost_total counter
myelin_flows_lost_total{direction="to-pod"} 2
# HELP myelin_host_routing_mode The node's host routing mode (bpf or legacy) with the reason for a fallback; the series of the mode in use is 1.
# TYPE myelin_host_routing_mode gauge
myelin_host_routing_mode{mode="bpf",reason=""} 1
# HELP myelin_controller_errors_total Runs of an agent control loop that ended in an error.
# TYPE myelin_controller_errors_total counter
myelin_controller_errors_total{controller="services"} 1
# HELP myelin_datapath_gc_entries_removed_total Entries garbage collection removed from a datapath table.
# TYPE myelin_datapath_gc_entries_removed_total counter
myelin_datapath_gc_entries_removed_total{table="nat"} 9
# HELP myelin_policy_events_total PolicyNotEnforced Events this agent sent about NetworkPolicies it cannot enforce as written, by result (posted; refused: the apiserver said no, not retried; failed: a timeout or server error, queued again; superseded: not posted, the policy was fixed or changed while it waited, or queued again).
# TYPE myelin_policy_events_total counter
myelin_policy_events_total{result="failed"} 1
myelin_policy_events_total{result="posted"} 6
myelin_policy_events_total{result="refused"} 2
myelin_policy_events_total{result="superseded"} 3
# HELP myelin_policy_events_waiting PolicyNotEnforced Events the last policy computation could not queue (a flood of broken policies; posted at 1/s); they wait for a later computation.
# TYPE myelin_policy_events_waiting gauge
myelin_policy_events_waiting 40
# HELP myelin_flow_policy_verdicts_skipped_total FORWARDED policy verdict flows sent without the policies that allow them: the agent's budget for policy evaluations (50 ms a second) was spent, as when a pod opens connections to ever new ports.
# TYPE myelin_flow_policy_verdicts_skipped_total counter
myelin_flow_policy_verdicts_skipped_total 11
# HELP myelin_policy_ct_evictions_total NetworkPolicy connections a new one pushed out of myelin_policy_ct (both of its buckets full), by kind (idle: no packet since their buckets last made room; in-use: live connections, whose next packets are judged again).
# TYPE myelin_policy_ct_evictions_total counter
myelin_policy_ct_evictions_total{kind="idle"} 12
myelin_policy_ct_evictions_total{kind="in-use"} 3
# HELP myelin_tunnel_plain_pod_to_node_total Packets from a pod address to this node's IP that arrived plain on the uplink while tunnel-pod-to-node is encapsulate (a node that does not encapsulate them yet, or a forger); they went on. Zero on every node before enforce.
# TYPE myelin_tunnel_plain_pod_to_node_total counter
myelin_tunnel_plain_pod_to_node_total 3
`
	names := []string{"myelin_endpoints", "myelin_retired_veths", "myelin_service_backends", "myelin_bpf_map_pressure",
		"myelin_bpf_map_read_errors_total", "myelin_bpf_map_read_failing", "myelin_nat_entries",
		"myelin_conntrack_entries", "myelin_drop_count_total", "myelin_forward_bytes_total", "myelin_datapath_events_lost_total",
		"myelin_flows_lost_total", "myelin_host_routing_mode", "myelin_controller_errors_total", "myelin_datapath_gc_entries_removed_total",
		"myelin_policy_events_total", "myelin_policy_events_waiting", "myelin_flow_policy_verdicts_skipped_total",
		"myelin_policy_ct_evictions_total", "myelin_tunnel_plain_pod_to_node_total"}
	if err := testutil.GatherAndCompare(a.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestAgentLint: every family the agent serves passes Prometheus' linter (the one
// promtool check metrics runs), HELP text included, before and after Use.
func TestAgentLint(t *testing.T) {
	a := NewAgent()
	a.ObserveSync("services", 3*time.Millisecond)
	a.LoadFailed()
	for _, stage := range []string{"before Use", "after Use"} {
		problems, err := testutil.GatherAndLint(a.Registry())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: lint %s: %s", stage, p.Metric, p.Text)
		}
		a.Use(knownSnapshot)
	}
	if n := testutil.CollectAndCount(a.syncLatency); n != 1 {
		t.Errorf("sync latency series: %d, want 1", n)
	}
}

// TestAgentBeforeUse: until the datapath is there, only datapath_loaded 0 (and
// the event-time and runtime metrics) are served.
func TestAgentBeforeUse(t *testing.T) {
	a := NewAgent()
	want := "# HELP myelin_datapath_loaded 1 once the BPF datapath is loaded and attached to the uplink, else 0.\n# TYPE myelin_datapath_loaded gauge\nmyelin_datapath_loaded 0\n"
	if err := testutil.GatherAndCompare(a.Registry(), strings.NewReader(want), "myelin_datapath_loaded", "myelin_endpoints"); err != nil {
		t.Error(err)
	}
}
