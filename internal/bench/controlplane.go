package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// Control-plane workload sizes (100 CNI ADDs; churn of 100 pods and 1,000
// Services; 10,000 Services of 10 backends each, 100,000 endpoints, programmed).
const (
	cniAddPods       = 100
	churnPods        = 100
	churnServices    = 1000
	programServices  = 10000
	programBackends  = 10
	controlPlaneNode = 1
	// churnLimit bounds one churn run: a wait that never ends is a failed run, not a
	// bench that hangs.
	churnLimit = 10 * time.Minute
)

// ControlPlane is a 1-node myelin lab for the control plane's costs: CNI ADD latency,
// the agent's CPU and memory idle and under churn, and the time it takes to program
// 10,000 Services. Its workloads ignore the client and server.
type ControlPlane struct {
	cluster  *Cluster
	held     bool
	cs       kubernetes.Interface // without client-side rate limits
	services int                  // filler Services created so far
	nodeIP   netip.Addr           // the node's IP, where its agent serves metrics
}

// NewControlPlane returns the control-plane environment.
func NewControlPlane() *ControlPlane {
	return &ControlPlane{cluster: NewCluster(LabSpec{Nodes: 1, CNI: string(labplan.CNIMyelin), Profile: "native"})}
}

// Name implements Environment.
func (c *ControlPlane) Name() string { return "control-plane" }

// Available implements Environment.
func (c *ControlPlane) Available() error { return c.cluster.Available() }

// Setup implements Environment: a 1-node myelin lab.
func (c *ControlPlane) Setup(ctx context.Context) (Endpoints, error) {
	c.held = true
	if err := c.cluster.acquire(ctx); err != nil {
		return Endpoints{}, err
	}
	cs, err := labdriver.BulkClient(c.cluster.Paths.Kubeconfig())
	if err != nil {
		return Endpoints{}, err
	}
	c.cs = cs
	if c.nodeIP, err = c.cluster.NodeIP(labplan.NodeName(controlPlaneNode)); err != nil {
		return Endpoints{}, err
	}
	node := NetNSHost{Path: labplan.NetNSPath(labplan.NodeName(controlPlaneNode))}
	return Endpoints{Client: node, Server: node}, nil
}

// Teardown implements Environment.
func (c *ControlPlane) Teardown() error {
	if !c.held {
		return nil
	}
	c.held = false
	return c.cluster.release()
}

// AgentIdle measures the agent of an idle node: CPU share and RSS over the run.
type AgentIdle struct{ Env *ControlPlane }

func (AgentIdle) Name() string { return "agent-idle" }
func (AgentIdle) Describe() string {
	return "myelin-agent of an idle lab node: CPU (% of one vCPU) and resident memory over the run"
}
func (AgentIdle) Metrics() []Metric {
	return []Metric{
		{Name: "cpu_pct", Unit: "% vCPU", Description: "agent CPU time / wall time"},
		{Name: "rss_mib", Unit: "MiB", Description: "agent peak resident memory"},
		{Name: "anon_mib", Unit: "MiB", Description: "agent peak anonymous memory (RssAnon: without the binary's file pages)"},
	}
}

// Run implements Workload.
func (w AgentIdle) Run(ctx context.Context, t Trial) (Sample, error) {
	pid, err := agentPID(labplan.NodeName(controlPlaneNode))
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(t.Duration):
		}
		close(stop)
	}()
	cpu, peak, err := watchAgentMemory(pid, stop)
	if err != nil {
		return nil, err
	}
	return Sample{"cpu_pct": 100 * cpu / t.Duration.Seconds(), "rss_mib": peak.rss, "anon_mib": peak.anon}, nil
}

// AgentChurn measures the agent while 100 pods and 1,000 Services are created and
// deleted through the API.
type AgentChurn struct{ Env *ControlPlane }

func (AgentChurn) Name() string { return "agent-churn" }
func (AgentChurn) Describe() string {
	return fmt.Sprintf("myelin-agent while %d pods and %d Services are created and deleted: agent CPU seconds, peak RSS, wall time", churnPods, churnServices)
}
func (AgentChurn) Metrics() []Metric {
	return []Metric{
		{Name: "cpu_s", Unit: "s", Description: "agent CPU seconds over the churn"},
		{Name: "rss_mib", Unit: "MiB", Description: "agent peak resident memory"},
		{Name: "wall_s", Unit: "s", Description: "time until everything was created, programmed and deleted again"},
	}
}

// Run implements Workload.
func (w AgentChurn) Run(ctx context.Context, t Trial) (Sample, error) {
	node := labplan.NodeName(controlPlaneNode)
	pid, err := agentPID(node)
	if err != nil {
		return nil, err
	}
	endWatch := startWatchAgent(pid)
	start := time.Now()
	churnCtx, cancel := context.WithTimeout(ctx, churnLimit)
	churnErr := w.churn(churnCtx, node)
	cancel()
	wall := time.Since(start)
	cpu, rss, werr := endWatch()
	if err := errors.Join(churnErr, werr); err != nil {
		return nil, err
	}
	return Sample{"cpu_s": cpu, "rss_mib": rss, "wall_s": wall.Seconds()}, nil
}

func (w AgentChurn) churn(ctx context.Context, node string) error {
	cs := w.Env.cs
	pods := cs.CoreV1().Pods("default")
	// Other cases leave Services behind (svc-program's 10,000), so the churn's own are
	// counted on top of what the agent programs before it starts.
	before, err := agentServices(ctx, node)
	if err != nil {
		return err
	}
	for i := 0; i < churnPods; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i), Labels: map[string]string{"app": "churn"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "infinity"}}}}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := labdriver.CreateServices(ctx, cs, "churn", "churn", churnServices, 8080); err != nil {
		return err
	}
	if err := waitAgentServices(ctx, node, func(n int) bool { return n >= before+churnServices }); err != nil {
		return err
	}
	if err := waitPods(ctx, cs, "app=churn", func(running, total int) bool { return running == churnPods }); err != nil {
		return err
	}
	if err := labdriver.DeleteServices(ctx, cs, "churn", churnServices); err != nil {
		return err
	}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: "app=churn"}); err != nil {
		return err
	}
	if err := waitAgentServices(ctx, node, func(n int) bool { return n <= before }); err != nil {
		return err
	}
	return waitPods(ctx, cs, "app=churn", func(_, total int) bool { return total == 0 })
}

// agentServices returns the number of frontends the node's agent has programmed once
// it has caught up with the API.
func agentServices(ctx context.Context, node string) (int, error) {
	n := 0
	err := waitAgentServices(ctx, node, func(have int) bool { n = have; return true })
	return n, err
}

// waitAgentServices waits until the node's agent, caught up with the API, reports a
// number of programmed frontends that satisfies ok.
func waitAgentServices(ctx context.Context, node string, ok func(int) bool) error {
	for {
		s, err := api.NewClient(api.NodeSocket(node)).Services(ctx)
		if err == nil && s.Synced && ok(len(s.Frontends)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the agent's Services: %w (last error %v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func waitPods(ctx context.Context, cs kubernetes.Interface, selector string, ok func(running, total int) bool) error {
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			running := 0
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if ok(running, len(list.Items)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pods %s: %w", selector, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fillerBackends waits until want filler pods (app=bench-filler) run with an address and
// returns them: the endpoints of the filler Services.
func fillerBackends(ctx context.Context, cs kubernetes.Interface, want int) ([]labdriver.Backend, error) {
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=bench-filler"})
		var backends []labdriver.Backend
		if err == nil {
			for _, p := range list.Items {
				ip, perr := netip.ParseAddr(p.Status.PodIP)
				if p.Status.Phase == corev1.PodRunning && perr == nil {
					backends = append(backends, labdriver.Backend{IP: ip, Node: p.Spec.NodeName})
				}
			}
			if len(backends) == want {
				return backends, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d filler pods (app=bench-filler) to run with an address, %d do: %w", want, len(backends), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ServiceProgram measures how long the agent takes to program 10,000 Services (10
// backends each: 100,000 endpoints) from its start: the Services are created once, then
// each run restarts the agent and waits until it reports them all programmed, and
// reads the agent's age (the time from its start, without the lab supervisor's restart
// backoff) and resident memory then.
type ServiceProgram struct{ Env *ControlPlane }

func (ServiceProgram) Name() string { return "svc-program" }
func (ServiceProgram) Describe() string {
	return fmt.Sprintf("time from an agent (re)start until it has programmed %d Services of %d backends each, and its RSS then", programServices, programBackends)
}
func (ServiceProgram) Metrics() []Metric {
	return []Metric{
		{Name: "seconds", Unit: "s", Description: "new agent process start until it is ready: every Service and backend programmed (then checked in its Services view)"},
		{Name: "restart_s", Unit: "s", Description: "`myelin lab restart` until programmed: adds the old agent's exit and the lab supervisor's restart backoff (>= 1 s)"},
		{Name: "rss_mib", Unit: "MiB", Description: "agent resident memory once programmed"},
		{Name: "anon_mib", Unit: "MiB", Description: "its anonymous part (RssAnon: heap, stacks, runtime; without the binary's file pages)"},
		{Name: "heap_inuse_mib", Unit: "MiB", Description: "the Go heap's spans in use then (live objects and garbage not yet swept)"},
		{Name: "heap_goal_mib", Unit: "MiB", Description: "the heap size at which the Go runtime collects next (NextGC): what the heap grows to"},
	}
}

// Run implements Workload.
func (w ServiceProgram) Run(ctx context.Context, t Trial) (Sample, error) {
	node := labplan.NodeName(controlPlaneNode)
	e := w.Env
	bin, err := e.cluster.binary()
	if err != nil {
		return nil, err
	}
	if e.services < programServices {
		backends, err := ensureFiller(ctx, e.cs, bin)
		if err != nil {
			return nil, err
		}
		if err := labdriver.CreateServicesWithEndpoints(ctx, e.cs, "filler", programServices, svcFillerPort, backends); err != nil {
			return nil, err
		}
		e.services = programServices
		if err := waitAgentBackends(ctx, node, time.Second); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := e.cluster.myelin(ctx, "lab", "restart", myelin.AgentProcess(node)); err != nil {
		return nil, err
	}
	// Ready means the first pass has programmed every Service and backend the agent
	// listed; it is cheap to ask often, unlike the 100,000-backend Services view, whose
	// encoding would be counted too. The view then checks the numbers.
	readyAt, err := waitAgentReady(ctx, node)
	if err != nil {
		return nil, err
	}
	if err := waitAgentBackends(ctx, node, 100*time.Millisecond); err != nil {
		return nil, err
	}
	took := readyAt.Sub(start).Seconds()
	pid, err := agentPID(node)
	if err != nil {
		return nil, err
	}
	age, err := processAge(pid)
	if err != nil {
		return nil, err
	}
	age -= time.Since(readyAt).Seconds()
	u, err := readUsage(pid)
	if err != nil {
		return nil, err
	}
	ms, err := agentMemstats(ctx, e.nodeIP)
	if err != nil {
		return nil, err
	}
	return Sample{"seconds": age, "restart_s": took, "rss_mib": u.rss, "anon_mib": u.anon,
		"heap_inuse_mib": ms["heap_inuse"], "heap_goal_mib": ms["next_gc"]}, nil
}

// ensureFiller creates the Deployment of programBackends lab HTTP servers, the filler
// Services' backends, and returns them once they run.
func ensureFiller(ctx context.Context, cs kubernetes.Interface, bin string) ([]labdriver.Backend, error) {
	d := fillerDeployment(bin)
	d.Spec.Replicas = new(int32)
	*d.Spec.Replicas = programBackends
	_, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, err
	}
	return fillerBackends(ctx, cs, programBackends)
}

// CNIAdd measures CNI ADD through libcni, as a runtime calls it, in the node's netns:
// 100 ADDs into fresh network namespaces, each followed by its DEL.
type CNIAdd struct{ Env *ControlPlane }

func (CNIAdd) Name() string { return "cni-add" }
func (CNIAdd) Describe() string {
	return fmt.Sprintf("myelin-cni ADD latency over %d pods, called through libcni as containerd does", cniAddPods)
}
func (CNIAdd) Metrics() []Metric {
	return []Metric{
		{Name: "p50_ms", Unit: "ms", Description: "median CNI ADD"},
		{Name: "p99_ms", Unit: "ms", Description: "99th percentile CNI ADD (the slowest of 100)"},
		{Name: "del_p50_ms", Unit: "ms", Description: "median CNI DEL"},
	}
}

// Tools implements ToolUser.
func (CNIAdd) Tools() []string { return []string{"ip"} }

// Run implements Workload.
func (w CNIAdd) Run(ctx context.Context, t Trial) (Sample, error) {
	node := labplan.NodeName(controlPlaneNode)
	conf, err := libcni.ConfListFromFile(filepath.Join(w.Env.cluster.Paths.CNIConfDir(node), nodelayout.CNIConfFile))
	if err != nil {
		return nil, fmt.Errorf("the agent's conflist: %w", err)
	}
	// In the lab directory, which lab down removes, not /tmp: a killed bench leaves it.
	cache, err := os.MkdirTemp(w.Env.cluster.Paths.Dir, "bench-cni-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cache)
	cni := libcni.NewCNIConfigWithCacheDir([]string{w.Env.cluster.Paths.CNIBinDir(node)}, cache, nil)
	var adds, dels []float64
	for i := 0; i < cniAddPods && ctx.Err() == nil; i++ {
		add, del, err := cniAddDel(ctx, cni, conf, node, i)
		if err != nil {
			return nil, err
		}
		adds, dels = append(adds, add), append(dels, del)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	slices.Sort(adds)
	return Sample{"p50_ms": Median(adds), "p99_ms": adds[len(adds)*99/100], "del_p50_ms": Median(dels)}, nil
}

// cniAddDel runs one ADD and one DEL into a fresh netns and returns their durations in ms.
func cniAddDel(ctx context.Context, cni *libcni.CNIConfig, conf *libcni.NetworkConfigList, node string, i int) (add, del float64, err error) {
	ns := fmt.Sprintf("%scni-%d", ProductPrefix, i)
	if err := addNetNS(ctx, ns); err != nil {
		return 0, 0, err
	}
	defer delNetNS(ns)
	id := fmt.Sprintf("%064x", 0xbe0c000+i)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns.Path(ns), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", ns}}}
	err = netns.Do(labplan.NetNSPath(node), func() error {
		start := time.Now()
		if _, err := cni.AddNetworkList(ctx, conf, rt); err != nil {
			return fmt.Errorf("CNI ADD %d: %w", i, err)
		}
		add = float64(time.Since(start).Microseconds()) / 1000
		start = time.Now()
		if err := cni.DelNetworkList(ctx, conf, rt); err != nil {
			return fmt.Errorf("CNI DEL %d: %w", i, err)
		}
		del = float64(time.Since(start).Microseconds()) / 1000
		return nil
	})
	return add, del, err
}

// ControlPlaneCases are the control-plane cases, in one stage with one lab.
func ControlPlaneCases() []Case {
	env := NewControlPlane()
	var out []Case
	for _, w := range []Workload{CNIAdd{env}, AgentIdle{env}, AgentChurn{env}, ServiceProgram{env}, NewPolicyScale(env)} {
		out = append(out, Case{Name: CaseName(env, w, Unpinned), Group: GroupControlPlane, Stage: env.Name(),
			Env: env, Workload: w, Placement: Unpinned})
	}
	return out
}
