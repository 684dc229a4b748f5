package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/kwok"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
	"github.com/myelin-net/myelin/internal/statefile"
)

// KwokScaleJSON is the file RunKwokScale writes its result to, in the output directory.
const KwokScaleJSON = "kwok-scale.json"

// Bounds of a kwok scale run: building 50,000 pods takes minutes on a small VM.
const (
	kwokBuildLimit = 45 * time.Minute
	kwokStepLimit  = 10 * time.Minute
)

// KwokScaleOptions is one scale simulation: a 1-node myelin lab whose apiserver also
// holds Shape's kwok nodes, pods and Services, and Churn pods replaced for the churn
// figure.
type KwokScaleOptions struct {
	Shape  kwok.Shape
	Churn  int
	OutDir string
	Myelin string // the myelin binary; "" is this executable
}

// KwokScaleResult is what RunKwokScale measured of the real agent (node-1's).
type KwokScaleResult struct {
	Shape     kwok.Shape `json:"shape"`
	Churn     int        `json:"churnPods"`
	BuildSecs float64    `json:"buildSeconds"` // creating the objects until kwok ran every pod
	// Readied are the pods the bench marked ready again (kwok.ReadyAgain), build and churn.
	Readied int `json:"podsReadiedAgain"`
	// PodIPs are the simulated pods' distinct addresses after the build: kwok v0.7.0's
	// pool hands out addresses past a node's PodCIDR (another node's) after it has
	// retried a pod's start, so two pods can share one; the agent programs each once.
	PodIPs     int          `json:"distinctPodIPs"`
	Sync       SyncFigures  `json:"sync"`
	ChurnRun   ChurnFigures `json:"churn"`
	IdleWrites float64      `json:"idleWrites"` // agent writes over a quiet minute after the churn
	IdleCPU    float64      `json:"idleCpuPct"` // agent CPU over that minute, % of one vCPU
}

// SyncFigures are an agent's restart with the simulated cluster present.
type SyncFigures struct {
	Seconds    float64 `json:"seconds"`           // agent process start until ready (every Service programmed)
	Programmed float64 `json:"programmedSeconds"` // ... until its Services view showed them all (polled)
	Frontends  int     `json:"frontends"`         // simulated Services' frontends in the view
	Backends   int     `json:"backends"`          // their backends
	CPUSeconds float64 `json:"cpuSeconds"`        // agent CPU from start until ready
	RSSMiB     float64 `json:"rssMiB"`            // at ready
	SettledMiB float64 `json:"settledRssMiB"`     // 30 s later
	PeakMiB    float64 `json:"peakRssMiB"`        // the most RSS it had until then (VmHWM)
	HeapMiB    float64 `json:"heapInuseMiB"`      // go_memstats_heap_inuse_bytes then
	// GoMemMiB are the agent's go_memstats_*_bytes gauges then, in MiB.
	GoMemMiB    map[string]float64 `json:"goMemstatsMiB,omitempty"`
	Writes      float64            `json:"writes"`      // agent create/update/patch/delete requests, start to ready
	Reads       float64            `json:"reads"`       // agent get/list/watch requests, start to ready
	PolicyReady bool               `json:"policyReady"` // the policy loop had computed with every pod
	NodesKnown  int                `json:"nodesKnown"`  // Nodes the agent knows
	Routes      int                `json:"nodeRoutes"`  // routes to other nodes' PodCIDRs it programmed
}

// ChurnFigures are the agent's costs while pods are replaced.
type ChurnFigures struct {
	Events      int     `json:"events"` // pod deletes + creates
	WallSeconds float64 `json:"wallSeconds"`
	CPUSeconds  float64 `json:"cpuSeconds"`
	// BackgroundPct is the agent's CPU (% of a vCPU) over the 20 s before the churn:
	// what it spends anyway (kwok's Node heartbeats, the policy resync).
	BackgroundPct float64 `json:"backgroundCpuPct"`
	// CPUPer1000 is CPUSeconds less the background over WallSeconds, per 1,000 events.
	CPUPer1000   float64 `json:"cpuSecondsPer1000Events"`
	PeakRSSMiB   float64 `json:"peakRssMiB"`
	Writes       float64 `json:"writes"`
	Converged    bool    `json:"converged"` // the agent's backends were the pods' IPs afterwards
	Mismatch     string  `json:"mismatch,omitempty"`
	KCMSeconds   float64 `json:"endpointSlicesSeconds"` // until the EndpointSlices held every new pod
	PodsSeconds  float64 `json:"podsRunningSeconds"`    // until kwok ran every new pod
	QuietSeconds float64 `json:"quietSeconds"`          // until the agent was back to its background
}

// RunKwokScale brings up the lab, kwok and the simulated cluster, measures the agent
// and brings everything down again, writing the result into OutDir and a summary to w.
func RunKwokScale(ctx context.Context, w io.Writer, o KwokScaleOptions) (KwokScaleResult, error) {
	res := KwokScaleResult{Shape: o.Shape, Churn: o.Churn}
	if err := o.Shape.Validate(); err != nil {
		return res, err
	}
	if o.Churn < 0 || o.Churn > o.Shape.Pods {
		return res, fmt.Errorf("scale: --churn %d: must be 0-%d (the pods to replace)", o.Churn, o.Shape.Pods)
	}
	if kwok.Bin() == "" {
		return res, fmt.Errorf("kwok %s is not built (%s): run make setup", kwok.Version, kwok.BinDir())
	}
	if err := statefile.OutDir(o.OutDir); err != nil {
		return res, err
	}
	cl := NewCluster(LabSpec{Nodes: 1, CNI: string(labplan.CNIMyelin), Profile: "native"})
	cl.Myelin = o.Myelin
	if err := cl.Available(); err != nil {
		return res, err
	}
	fmt.Fprintf(w, "scale: lab up (1 node)\n")
	err := cl.acquire(ctx)
	if err == nil {
		err = runKwokInLab(ctx, w, cl, o, &res)
	}
	fmt.Fprintf(w, "scale: lab down\n")
	err = errors.Join(err, cl.release())
	if werr := writeKwokResult(o.OutDir, res); werr != nil {
		err = errors.Join(err, werr)
	}
	return res, err
}

// runKwokInLab runs kwok for the lab of cl and measures with it.
func runKwokInLab(ctx context.Context, w io.Writer, cl *Cluster, o KwokScaleOptions, res *KwokScaleResult) error {
	plan, err := lab.LoadPlan(cl.Paths)
	if err != nil {
		return err
	}
	cs, err := labdriver.BulkClient(cl.Paths.Kubeconfig())
	if err != nil {
		return err
	}
	if err := createAgentFlowSchemas(ctx, cs); err != nil {
		return err
	}
	proc, err := kwok.Start(cl.Paths.Kubeconfig(), filepath.Join(o.OutDir, "kwok.log"))
	if err != nil {
		return err
	}
	defer func() { _ = proc.Stop() }()
	node := labplan.NodeName(controlPlaneNode)
	real, ok := plan.Node(node)
	if !ok {
		return fmt.Errorf("the lab has no node %s", node)
	}
	r := &kwokRun{cl: cl, cs: cs, sim: kwok.Cluster{Shape: o.Shape, ClusterCIDR: plan.Addressing.ClusterCIDR,
		SegmentA: plan.Addressing.SegmentA}, w: w, kwok: proc, out: o.OutDir, node: node, nodeIP: real.IP}
	defer func() { res.Readied = r.readied }() // also when a step fails: the result is written then too
	start := time.Now()
	if err := r.build(ctx); err != nil {
		return err
	}
	res.BuildSecs = time.Since(start).Seconds()
	fmt.Fprintf(w, "scale: built in %.0f s\n", res.BuildSecs)
	res.PodIPs = r.podIPs
	if r.podIPs < r.sim.Pods {
		fmt.Fprintf(w, "scale: the %d pods have %d distinct addresses (kwok's IP pool repeats addresses after retries): the agent programs each once\n",
			r.sim.Pods, r.podIPs)
	}
	if err := r.measure(ctx, o.Churn, res); err != nil {
		return err
	}
	return proc.Exited(context.Background())
}

// measure takes the figures of a built simulated cluster: the agent's restart, a churn
// of churn pods (none: no churn) and an idle minute.
func (r *kwokRun) measure(ctx context.Context, churn int, res *KwokScaleResult) error {
	var err error
	if res.Sync, err = r.measureSync(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.w, "scale: sync %.2f s (programmed view %.2f s), %d frontends, %d backends, RSS %.0f MiB (settled %.0f, peak %.0f), %.0f writes\n",
		res.Sync.Seconds, res.Sync.Programmed, res.Sync.Frontends, res.Sync.Backends, res.Sync.RSSMiB, res.Sync.SettledMiB,
		res.Sync.PeakMiB, res.Sync.Writes)
	if churn > 0 {
		if res.ChurnRun, err = r.measureChurn(ctx, churn); err != nil {
			return err
		}
		c := res.ChurnRun
		fmt.Fprintf(r.w, "scale: churn %d events in %.0f s: %.2f CPU s (%.2f per 1,000 above the background), peak RSS %.0f MiB, %.0f writes, converged %v %s\n",
			c.Events, c.WallSeconds, c.CPUSeconds, c.CPUPer1000, c.PeakRSSMiB, c.Writes, c.Converged, c.Mismatch)
	}
	if res.IdleWrites, res.IdleCPU, err = r.idle(ctx, time.Minute); err != nil {
		return err
	}
	fmt.Fprintf(r.w, "scale: idle minute: %.0f agent writes, agent CPU %.2f%% of a vCPU\n", res.IdleWrites, res.IdleCPU)
	// After the minute, not during it: the profile's own cost stays out of the figure.
	if err := r.saveAgentProfile(ctx, "profile", "seconds=30", "agent-idle-cpu.pprof"); err != nil {
		fmt.Fprintf(r.w, "scale: no idle CPU profile: %v\n", err)
	}
	return nil
}

func writeKwokResult(dir string, res KwokScaleResult) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, KwokScaleJSON), append(b, '\n'), 0o644)
}

// kwokRun is one simulation in a running lab.
type kwokRun struct {
	cl      *Cluster
	cs      kubernetes.Interface
	sim     kwok.Cluster
	w       io.Writer
	kwok    *kwok.Process
	out     string     // the output directory
	node    string     // the real node
	nodeIP  netip.Addr // its IP, where its agent serves metrics
	readied int        // pods marked ready again (readyAgain)
	podIPs  int        // the simulated pods' distinct addresses, as waitSlicesCurrent last listed them
}

// build creates the simulated cluster and waits until kwok runs every pod and the
// agent has programmed every Service with all its backends.
func (r *kwokRun) build(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kwokBuildLimit)
	defer cancel()
	if err := r.waitServiceAccounts(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.w, "scale: creating %d kwok nodes, %d Services, %d pods\n", r.sim.Nodes, r.sim.Services, r.sim.Pods)
	if err := r.sim.Create(ctx, r.cs); err != nil {
		return err
	}
	if err := r.waitPodsRunning(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.w, "scale: every pod runs; waiting for the EndpointSlices and the agent\n")
	if err := r.saveSamplePod(ctx); err != nil {
		return err
	}
	if err := r.waitSlicesCurrent(ctx); err != nil {
		return err
	}
	_, err := r.waitViewComplete(ctx, 2*time.Second)
	return err
}

// saveSamplePod writes simulated pod 0 as the apiserver returns it (kwok's status and
// the managed fields included) into the output directory: what an informer holds per pod.
func (r *kwokRun) saveSamplePod(ctx context.Context) error {
	p, err := r.cs.CoreV1().Pods(r.sim.PodNamespace(0)).Get(ctx, kwok.PodName(0), metav1.GetOptions{})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.out, "sample-pod.json"), append(b, '\n'), 0o644)
}
