package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/healthcheck"
	"github.com/myelin-net/myelin/internal/service"
)

// serviceLoop implements Services on the node with kube-proxy-replacement: the
// Service watcher keeps the Service maps (adopted from the previous run, ids kept)
// in step with the cluster, and feeds the health check listeners of
// externalTrafficPolicy: Local Services (kube-proxy serves both when it runs
// instead), and kube-proxy's own healthz and proxyMode endpoints. Loops "services",
// "health-check-ports" and "kube-proxy-endpoints".
type serviceLoop struct {
	node         string
	algorithm    string
	manager      *service.Manager
	watcher      *service.Watcher
	healthChecks *healthcheck.Server
	kubeProxy    healthcheck.KubeProxy
}

// prestartServices makes the Service watcher and starts its informers, so that the
// initial Service and EndpointSlice lists download while the datapath loads (0.5 s of
// verifier on a 2-vCPU node) instead of after it; nil with kube-proxy-replacement
// false. newServiceLoop gives it its Manager.
func (st *startup) prestartServices(ctx context.Context) *service.Watcher {
	if !st.plan.KubeProxyReplacement {
		return nil
	}
	w := service.NewWatcher(st.cs, nil, service.Options{NodeName: st.plan.Node, NodeIP: st.plan.NodeIP},
		func(err error) { st.loops.report("services", err) }, st.log)
	w.Prestart(ctx)
	return w
}

// newServiceLoop adopts the Service maps and wires the prestarted watcher w to them
// and to the health checks; with kube-proxy-replacement false it returns nil: the
// datapath was loaded without load balancing.
func newServiceLoop(p nodePlan, dp service.Datapath, w *service.Watcher, l *loops, log *slog.Logger) (*serviceLoop, error) {
	if !p.KubeProxyReplacement || w == nil {
		return nil, nil
	}
	m, err := service.NewManager(dp, p.MaglevTableSize)
	if err != nil {
		return nil, fmt.Errorf("adopt the service maps: %w", err)
	}
	s := &serviceLoop{node: p.Node, algorithm: p.LBAlgorithm, manager: m, watcher: w}
	w.SetManager(m)
	// Health check answers are 503 until the watcher's first full pass, as
	// kube-proxy's are until it has synced.
	s.healthChecks = healthcheck.New(s.isSynced, func(err error) { l.report("health-check-ports", err) },
		log.With("loop", "health-check-ports"))
	s.watcher.OnHealthCheck(s.healthChecks.Update)
	s.kubeProxy = healthcheck.KubeProxy{HealthzAddr: p.KubeProxyHealthz, MetricsAddr: p.KubeProxyMetrics,
		Synced: s.isSynced, Report: func(err error) { l.report("kube-proxy-endpoints", err) },
		Log: log.With("loop", "kube-proxy-endpoints")}
	return s, nil
}

// Run serves the health check ports and kube-proxy's endpoints, and runs the watcher
// until ctx ends.
func (s *serviceLoop) Run(ctx context.Context) {
	go s.healthChecks.Run(ctx)
	go s.kubeProxy.Run(ctx)
	go releaseAfterSync(ctx, s.watcher.Synced())
	s.watcher.Run(ctx)
}

// releaseAfterSync hands the memory of the initial Service and EndpointSlice lists back
// to the kernel once the first pass has programmed them: decoding 10,000 of each
// leaves tens of MiB of garbage that the Go runtime would otherwise keep mapped (and
// count in the agent's RSS) for minutes. One forced collection, once.
func releaseAfterSync(ctx context.Context, synced <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-synced:
		debug.FreeOSMemory()
	}
}

// synced is closed once the watcher's first full pass is done; nil (never closed)
// when myelin does not serve Services.
func (s *serviceLoop) synced() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.watcher.Synced()
}

func (s *serviceLoop) isSynced() bool {
	select {
	case <-s.watcher.Synced():
		return true
	default:
		return false
	}
}

func (s *serviceLoop) servedBy() string {
	svcs, frontends, backends := s.manager.Counts()
	return fmt.Sprintf("myelin (kube-proxy-replacement, %s): %d services, %d frontends, %d backends, %d health check ports",
		s.algorithm, svcs, frontends, backends, len(s.healthChecks.Ports()))
}

// writeServicesView writes what GET /v1/services answers, one frontend at a time.
func (s *serviceLoop) writeServicesView(w io.Writer) error {
	head := api.Services{Node: s.node, ServedBy: "myelin", Algorithm: s.algorithm, Synced: s.isSynced()}
	applied, backends := s.manager.Snapshot()
	return writeServices(w, head, func(yield func(api.ServiceFrontend) error) error {
		for _, f := range applied {
			if err := yield(frontendView(f, backends)); err != nil {
				return err
			}
		}
		return nil
	})
}
