package bench

import "fmt"

// Case groups.
const (
	GroupBaseline     = "baseline"
	GroupMyelin       = "myelin"
	GroupPeer         = "peer"
	GroupService      = "service"
	GroupControlPlane = "control-plane"
)

// Matrix builds the cases of one environment: every workload in every placement, named
// <env>/<workload>/<placement>. With a baseline environment, each case is compared to the
// baseline's case of the same workload and placement (which must be in the catalog too).
func Matrix(env Environment, group string, baseline Environment, workloads []Workload, placements []Placement) []Case {
	var out []Case
	for _, w := range workloads {
		for _, p := range placements {
			c := Case{Name: CaseName(env, w, p), Group: group, Env: env, Workload: w, Placement: p}
			if baseline != nil {
				c.Baseline = CaseName(baseline, w, p)
			}
			out = append(out, c)
		}
	}
	return out
}

// CaseName is the name Matrix gives a case.
func CaseName(env Environment, w Workload, p Placement) string {
	return fmt.Sprintf("%s/%s/%s", env.Name(), w.Name(), p.Name)
}

// ClientServerWorkloads are the workloads every datapath is measured with.
func ClientServerWorkloads() []Workload {
	return []Workload{TCPRR(), TCPCRR(), TCPStream(), UDPLoss()}
}

// Placements are the placements every client/server workload is measured in.
func Placements() []Placement { return []Placement{SameVCPU, CrossVCPU} }

// Catalog is every case `myelin bench` knows, in report order, with environments named
// from prefix (ProductPrefix in the product; tests use their own): first the baselines
// that need no lab (stage ""), then the lab stages of LabCases.
func Catalog(prefix string) []Case {
	lo, veth := &Loopback{Prefix: prefix}, &VethPair{Prefix: prefix}
	cases := Matrix(lo, GroupBaseline, nil, ClientServerWorkloads(), Placements())
	cases = append(cases, Matrix(veth, GroupBaseline, lo, ClientServerWorkloads(), Placements())...)
	cases = append(cases, LabCases(prefix)...)
	cases = append(cases, ServiceScaleCases(ServiceCounts)...)
	cases = append(cases, SockLBCases()...)
	return append(cases, ControlPlaneCases()...)
}

// ServiceCounts are the numbers of Services the Service scale cases run with.
var ServiceCounts = []int{10, 1000, 10000}

// QuickCases are the patterns of the --quick case set: one case of every kind of stage
// (the no-lab baselines, each lab stage, a Service lab and the control plane) with
// their baselines, in 1 round of 1 s runs: a check that every stage still works. The
// Service stages differ only in proxy and Service count, and the 1,000 and 10,000
// Service ones take minutes to set up, so only svc-myelin-10 stands for them.
var QuickCases = []string{
	"veth-pair/tcp-rr/same-vcpu",
	"native/bpf-cross-node/tcp-rr/same-vcpu",
	"tunnel/bpf-cross-node/tcp-rr/same-vcpu",
	"bigtcp/bigtcp-cross-node/tcp-stream/same-vcpu",
	"plain/bridge-cross-node/tcp-rr/same-vcpu",
	"flannel-vxlan/flannel-cross-node/tcp-rr/same-vcpu",
	"flannel-host-gw/flannel-cross-node/tcp-rr/same-vcpu",
	"svc-myelin-10/svc-crr/same-vcpu",
	"control-plane/agent-idle",
}

// QuickNoLabCases are the quick cases that need no lab, what make test runs
// (`--quick --cases loopback/tcp-rr,veth-pair/tcp-rr`): seconds instead of minutes.
var QuickNoLabCases = []string{"loopback/tcp-rr", "veth-pair/tcp-rr"}

// QuickRounds is the rounds of --quick unless --rounds is given.
const QuickRounds = 1
