package metrics

import (
	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/datapath"
)

// Snapshot is the agent's state as one scrape reports it. Zero parts are parts
// not running (yet): their metrics are left out rather than reported as zero.
type Snapshot struct {
	// Endpoints are the pods programmed in the datapath on this node.
	Endpoints int
	// IPAMUsed and IPAMTotal are the node's pod addresses in use and in the pool.
	IPAMUsed, IPAMTotal int
	// RetiredVeths are deleted pods' host veths waiting for the agent to delete them.
	RetiredVeths int
	// Services is nil unless myelin serves Services (kube-proxy-replacement).
	Services *ServiceCounts
	// Maps are the datapath's fillable maps (MapCache.Samples).
	Maps []MapSample
	// Counters are the datapath's packet and byte counters (datapath.Metrics).
	Counters []datapath.Metric
	// ICMPRejectsSuppressed counts Service rejects left unanswered over the ICMP rate.
	ICMPRejectsSuppressed uint64
	// PolicyCTEvictions are the connections pushed out of the NetworkPolicy
	// connection table; nil when they could not be read.
	PolicyCTEvictions *datapath.PolicyCTEvictions
	// AttachErrors counts failed program attachments since the datapath loaded.
	AttachErrors uint64
	// Datapath is set once the datapath is loaded.
	Datapath bool
	// RoutingMode is "native" or "tunnel"; HostRouting "bpf" or "legacy", with the
	// reason for it (empty when the mode was asked for and granted).
	RoutingMode, HostRouting, HostRoutingReason string
	Controllers                                 []Controller
	GC                                          []GCStat
	// NodeHealth are the node health matrix's series (nil with probing off).
	NodeHealth []clusterhealth.Sample
	// PolicyEvents is nil until the policy loop runs.
	PolicyEvents *PolicyEventCounts
	// FlowVerdictsSkipped counts policy verdict flows sent without their policies
	// list: the flow reader's budget for policy evaluations was spent.
	FlowVerdictsSkipped uint64
}

// PolicyEventCounts are the policy loop's PolicyNotEnforced Events: those posted,
// refused by the apiserver (4xx, not retried), failed otherwise (queued again),
// and those the last computation could not queue (they wait for a later one).
type PolicyEventCounts struct {
	Posted, Refused, Failed, Superseded uint64
	Waiting                             int
}

// ServiceCounts is what the Service loop has programmed.
type ServiceCounts struct {
	Services, Frontends, Backends int
}

// Controller is one control loop's runs and errors since the agent started.
type Controller struct {
	Name         string
	Runs, Errors uint64
	// Failing is whether its last run ended in an error.
	Failing bool
}

// GCStat is one datapath table's garbage collection since the agent started.
type GCStat struct {
	Table         string // "nat", "nodeport-nat", "service-ct", "policy-ct"
	Runs, Removed uint64
}
