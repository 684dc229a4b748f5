package bench

import (
	"context"
	"net/netip"
	"os/exec"
	"time"
)

// A Case is one measured combination: a workload run between the client and server of an
// environment with a placement. Its Name is unique in a run ("veth-pair/tcp-rr/same-vcpu").
type Case struct {
	Name string
	// Group labels the case in the report: "baseline", "myelin", "peer", "service".
	Group string
	// Stage orders cases whose environments cannot coexist (a lab runs one routing mode
	// at a time): the stages run one after another, each building its environments,
	// running its rounds and tearing down. A case's baseline must be in its stage.
	Stage     string
	Env       Environment
	Workload  Workload
	Placement Placement
	// Baseline names the case this one is compared to in the same round ("" for none).
	Baseline string
}

// Placement pins the client and the server to vCPUs. On small VMs a wakeup across
// vCPUs costs tens of microseconds, so request/response rates differ several times
// between the placements; reports carry both.
type Placement struct {
	Name           string
	Client, Server int // vCPU numbers; negative leaves that side unpinned
}

// The two placements every client/server workload is measured in.
var (
	SameVCPU  = Placement{Name: "same-vcpu", Client: 0, Server: 0}
	CrossVCPU = Placement{Name: "cross-vcpu", Client: 0, Server: 1}
	// Unpinned is for workloads that are not a client and a server (CNI ADD latency).
	Unpinned = Placement{Name: "unpinned", Client: -1, Server: -1}
)

// maxCPU is the highest vCPU the placement uses.
func (p Placement) maxCPU() int { return max(p.Client, p.Server) }

// An Environment is where a case's client and server run. Run builds each environment
// once (Setup), runs every round in it and calls Teardown when done, on error and when the
// context is cancelled. Teardown must be safe after a partial Setup and when repeated.
type Environment interface {
	// Name identifies the environment; cases share an environment by sharing its value.
	Name() string
	// Available reports why the environment cannot be built on this machine (missing
	// root, tool or feature), or nil. It must not change anything.
	Available() error
	Setup(ctx context.Context) (Endpoints, error)
	Teardown() error
}

// Endpoints are the two sides of an environment.
type Endpoints struct {
	Client Host
	Server Host
	// ServerAddr is the address servers listen on and clients connect to; servers bind to
	// it, never to a wildcard address.
	ServerAddr netip.Addr
}

// A Host runs commands in one network namespace on this machine.
type Host interface {
	// Command returns a command running argv in the host's network namespace pinned to
	// vCPU cpu (unpinned when cpu < 0). The command is killed when ctx is done and when
	// the bench process dies.
	Command(ctx context.Context, cpu int, argv ...string) *exec.Cmd
}

// A Workload is what a case runs once per round: a client/server workload (netperf
// TCP_RR, iperf3 UDP, TCP_CRR through a Service) or a control-plane measurement (CNI
// ADD latency, the agent's CPU and memory, Service programming time), which has no
// client or server of its own.
type Workload interface {
	// Name is short and lowercase ("tcp-rr"); it is part of case names.
	Name() string
	// Describe says in one line what the workload measures, for --list.
	Describe() string
	// Metrics lists what a sample carries; the first is the headline metric charted and
	// used for ratios in summaries.
	Metrics() []Metric
	// Run runs the workload once for t.Duration and returns its figures.
	Run(ctx context.Context, t Trial) (Sample, error)
}

// A ClientServer workload talks from the environment's client to a server the runner
// starts once per environment and server vCPU (nil: it starts its own, or none).
type ClientServer interface {
	Workload
	Server() *ServerSpec
}

// A ToolUser workload runs executables, checked before the run.
type ToolUser interface {
	Tools() []string
}

// A Counted workload can end a run after a number of transactions (Trial.Transactions)
// instead of after a time, and gains by it: netserver ends a timed netperf TCP_CRR run
// only when its own timer expires, 4 s after the run length (it can't tell the last
// connection from the next), so every timed CRR run idles 4 s; a run by count ends with
// its last transaction.
type Counted interface {
	Counted() bool
}

// counted reports whether w's runs can go by count.
func counted(w Workload) bool {
	c, ok := w.(Counted)
	return ok && c.Counted()
}

// workloadTools are the executables w runs.
func workloadTools(w Workload) []string {
	if t, ok := w.(ToolUser); ok {
		return t.Tools()
	}
	return nil
}

// workloadServer is the server w talks to, or nil.
func workloadServer(w Workload) *ServerSpec {
	if cs, ok := w.(ClientServer); ok {
		return cs.Server()
	}
	return nil
}

// A Trial is one run of a workload.
type Trial struct {
	Client    Host
	Server    Target
	Placement Placement
	Duration  time.Duration
	// BPFStats asks the workload for the BPF figures (bpfstats.go): the kernel's BPF
	// statistics are on for the whole run.
	BPFStats bool
	// Transactions, when positive, ends a Counted workload's run after this many
	// transactions instead of after Duration (the runner sets it from the case's last
	// rate, or a calibration run's, so the run lasts about as long).
	Transactions int64
}

// Target is where a started server listens.
type Target struct {
	Addr netip.Addr
	Port int
}

// A ServerSpec describes a server process that Run starts once per environment and
// server vCPU, pinned with taskset, and stops before the environment's teardown.
type ServerSpec struct {
	// Name identifies the server; workloads with the same server Name share the process.
	Name string
	// BasePort is the first port handed out; each started server gets the next one.
	BasePort int
	// Argv is the server's command line listening on addr:port.
	Argv func(addr netip.Addr, port int) []string
}

// A Sample is the figures of one run, keyed by Metric.Name.
type Sample map[string]float64

// A Metric is one figure a workload reports.
type Metric struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// HigherIsBetter is false for latencies, loss and CPU cost.
	HigherIsBetter bool   `json:"higherIsBetter"`
	Description    string `json:"description"`
}
