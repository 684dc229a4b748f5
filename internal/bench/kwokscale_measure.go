package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/kwok"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
)

// measureSync restarts the agent and measures its way to ready with the simulated
// cluster present: process age at ready, CPU, RSS, and its requests to the apiserver.
func (r *kwokRun) measureSync(ctx context.Context) (SyncFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, kwokStepLimit)
	defer cancel()
	var f SyncFigures
	before, err := agentRequests(ctx, r.cs)
	if err != nil {
		return f, err
	}
	fmt.Fprintf(r.w, "scale: restarting the agent\n")
	if err := r.cl.myelin(ctx, "lab", "restart", myelin.AgentProcess(r.node)); err != nil {
		return f, err
	}
	readyAt, err := waitAgentReady(ctx, r.node)
	if err != nil {
		return f, err
	}
	pid, err := agentPID(r.node)
	if err != nil {
		return f, err
	}
	u, err := readUsage(pid)
	if err != nil {
		return f, err
	}
	age, err := processAge(pid)
	if err != nil {
		return f, err
	}
	f.Seconds, f.CPUSeconds, f.RSSMiB = age-time.Since(readyAt).Seconds(), u.cpu, u.rss
	after, err := agentRequests(ctx, r.cs)
	if err != nil {
		return f, err
	}
	f.Writes, f.Reads = after.writes-before.writes, after.reads-before.reads
	view, err := r.waitViewComplete(ctx, 100*time.Millisecond)
	if err != nil {
		return f, err
	}
	if age, err = processAge(pid); err != nil {
		return f, err
	}
	f.Programmed = age - time.Since(view.at).Seconds()
	f.Frontends, f.Backends = view.frontends, view.backends
	if f.PolicyReady, err = r.waitPolicy(ctx); err != nil {
		return f, err
	}
	st, err := api.NewClient(api.NodeSocket(r.node)).Status(ctx)
	if err != nil {
		return f, err
	}
	f.NodesKnown, f.Routes = st.Nodes.Known, st.Routing.Routes
	err = r.measureSettled(ctx, pid, &f)
	return f, err
}

// measureSettled fills in the agent's memory 30 s after it was ready, and saves a
// heap profile of it.
func (r *kwokRun) measureSettled(ctx context.Context, pid int, f *SyncFigures) error {
	time.Sleep(30 * time.Second)
	u, err := readUsage(pid)
	if err != nil {
		return err
	}
	f.SettledMiB, f.PeakMiB = u.rss, u.hwm
	if f.GoMemMiB, err = agentMemstats(ctx, r.nodeIP); err == nil {
		f.HeapMiB = f.GoMemMiB["heap_inuse"]
	}
	if err := r.saveAgentProfile(ctx, "heap", "", "agent-heap.pprof"); err != nil {
		fmt.Fprintf(r.w, "scale: no heap profile: %v\n", err)
	}
	return nil
}

// measureChurn replaces n pods (deletes, then creates them again: kwok gives the new
// ones new IPs) and measures the agent until its view holds the new pods and its CPU
// is back to what it used before (at 50,000 pods it never idles: kwok's Node
// heartbeats and the policy resync cost a few % of a vCPU).
func (r *kwokRun) measureChurn(ctx context.Context, n int) (ChurnFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, kwokStepLimit)
	defer cancel()
	f := ChurnFigures{Events: 2 * n}
	pid, err := agentPID(r.node)
	if err != nil {
		return f, err
	}
	bg, err := cpuRate(ctx, pid, churnBackground)
	if err != nil {
		return f, err
	}
	f.BackgroundPct = 100 * bg
	fmt.Fprintf(r.w, "scale: the agent's background before the churn: %.1f%% of a vCPU\n", f.BackgroundPct)
	before, err := agentRequests(ctx, r.cs)
	if err != nil {
		return f, err
	}
	endWatch := startWatchAgent(pid)
	// A CPU profile of the churn's first 20 s (profiling adds a few % to the CPU measured).
	profiled := make(chan error, 1)
	go func() { profiled <- r.saveAgentProfile(ctx, "profile", "seconds=20", "agent-churn-cpu.pprof") }()
	start := time.Now()
	err = r.churn(ctx, n, pid, bg, start, &f)
	f.WallSeconds = time.Since(start).Seconds()
	f.QuietSeconds = f.WallSeconds
	cpu, rss, werr := endWatch()
	if perr := <-profiled; perr != nil {
		fmt.Fprintf(r.w, "scale: no CPU profile: %v\n", perr)
	}
	if err = errors.Join(err, werr); err != nil {
		return f, err
	}
	f.CPUSeconds, f.PeakRSSMiB = cpu, rss
	f.CPUPer1000 = max(0, cpu-bg*f.WallSeconds) / float64(f.Events) * 1000
	after, err := agentRequests(ctx, r.cs)
	if err != nil {
		return f, err
	}
	f.Writes = after.writes - before.writes
	f.Mismatch, err = r.viewMatchesPods(ctx)
	f.Converged = err == nil && f.Mismatch == ""
	return f, err
}

// churnBackground is how long the agent's CPU is measured before the churn.
const churnBackground = 20 * time.Second

// churn replaces n pods and waits, saying how long each step took, until the agent's
// view holds the new pods and its CPU is back to bg (CPU seconds a second).
func (r *kwokRun) churn(ctx context.Context, n, pid int, bg float64, start time.Time, f *ChurnFigures) error {
	fmt.Fprintf(r.w, "scale: churn: replacing %d pods\n", n)
	if err := r.sim.DeletePods(ctx, r.cs, 0, n); err != nil {
		return err
	}
	if err := r.sim.CreatePods(ctx, r.cs, 0, n); err != nil {
		return err
	}
	if err := r.waitPodsRunning(ctx); err != nil {
		return err
	}
	f.PodsSeconds = time.Since(start).Seconds()
	if err := r.waitSlicesCurrent(ctx); err != nil {
		return err
	}
	f.KCMSeconds = time.Since(start).Seconds()
	fmt.Fprintf(r.w, "scale: churn: pods running after %.0f s, EndpointSlices current after %.0f s\n", f.PodsSeconds, f.KCMSeconds)
	err := poll(ctx, 2*time.Second, "the agent's Services view to hold the new pods", func() (bool, string, error) {
		d, err := r.viewMatchesPods(ctx)
		return err == nil && d == "", d, nil
	})
	if err == nil {
		err = waitAgentBack(ctx, pid, bg)
	}
	return err
}

// cpuRate is the agent's CPU seconds a second over d.
func cpuRate(ctx context.Context, pid int, d time.Duration) (float64, error) {
	u0, err := readUsage(pid)
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	u1, err := readUsage(pid)
	return (u1.cpu - u0.cpu) / d.Seconds(), err
}

// idle counts the agent's writes and its CPU share (% of a vCPU) over d with nothing
// changing but what kwok's Nodes report.
func (r *kwokRun) idle(ctx context.Context, d time.Duration) (writes, cpuPct float64, err error) {
	pid, err := agentPID(r.node)
	if err != nil {
		return 0, 0, err
	}
	before, err := agentRequests(ctx, r.cs)
	if err != nil {
		return 0, 0, err
	}
	rate, err := cpuRate(ctx, pid, d)
	if err != nil {
		return 0, 0, err
	}
	after, err := agentRequests(ctx, r.cs)
	return after.writes - before.writes, 100 * rate, err
}

// waitAgentBack waits until the agent used at most its background bg (CPU seconds a
// second) and 2% of a vCPU more over 5 s: it has caught up with the changes.
func waitAgentBack(ctx context.Context, pid int, bg float64) error {
	const window = 5 * time.Second
	for {
		rate, err := cpuRate(ctx, pid, window)
		if err != nil {
			return fmt.Errorf("waiting for the agent to be back to its background CPU (%.1f%% of a vCPU): %w", 100*bg, err)
		}
		if rate <= bg+0.02 {
			return nil
		}
	}
}

// waitServiceAccounts creates the simulated namespaces and waits for their default
// ServiceAccounts, which pod admission needs (the controller-manager creates them).
func (r *kwokRun) waitServiceAccounts(ctx context.Context) error {
	if err := r.sim.CreateNamespaces(ctx, r.cs); err != nil {
		return err
	}
	return poll(ctx, time.Second, "the default ServiceAccounts of the simulated namespaces", func() (bool, string, error) {
		list, err := r.cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
		if err != nil {
			return false, err.Error(), nil
		}
		have := 0
		for _, sa := range list.Items {
			if kwok.IsNamespace(sa.Namespace) {
				have++
			}
		}
		return have == r.sim.Namespaces(), fmt.Sprintf("%d of %d", have, r.sim.Namespaces()), nil
	})
}

// waitPodsRunning waits until every simulated pod runs with an IP (kwok sets both at
// once); they all exist, as their creation succeeded.
func (r *kwokRun) waitPodsRunning(ctx context.Context) error {
	return poll(ctx, 2*time.Second, "kwok to run every pod", func() (bool, string, error) {
		list, err := r.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0",
			LabelSelector: kwok.PodSelector, FieldSelector: "status.phase!=Running"})
		if err != nil {
			return false, err.Error(), nil
		}
		// Every pod was created (the writes succeeded): none may be pending.
		return len(list.Items) == 0, fmt.Sprintf("%d pods not running", len(list.Items)), nil
	})
}

// poll calls check every interval until it reports done, ctx ends or it fails.
func poll(ctx context.Context, interval time.Duration, what string, check func() (bool, string, error)) error {
	for {
		ok, state, err := check()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%s): %w", what, state, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// agentMemstats are the go_memstats_*_bytes gauges of the agent on the node at nodeIP,
// from its metrics endpoint, in MiB, by name without prefix and suffix ("heap_inuse").
func agentMemstats(ctx context.Context, nodeIP netip.Addr) (map[string]float64, error) {
	b, err := httpGet(ctx, "http://"+net.JoinHostPort(nodeIP.String(), "9962")+"/metrics")
	if err != nil {
		return nil, err
	}
	return parseGoMemstats(string(b))
}

// parseGoMemstats reads the go_memstats_*_bytes samples of a Prometheus text exposition.
func parseGoMemstats(text string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "go_memstats_") || !strings.HasSuffix(name, "_bytes") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err == nil {
			out[strings.TrimSuffix(strings.TrimPrefix(name, "go_memstats_"), "_bytes")] = f / (1 << 20)
		}
	}
	if _, ok := out["heap_inuse"]; !ok {
		return nil, fmt.Errorf("no go_memstats_heap_inuse_bytes in the agent's metrics")
	}
	return out, nil
}
