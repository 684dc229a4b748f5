package agent

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/flowmetrics"
	"github.com/myelin-net/myelin/internal/metrics"
)

// agentMetrics serves the node's two Prometheus endpoints: the agent's myelin_
// metrics (prometheus-serve-addr; internal/metrics, read at scrape time) and the
// flow metrics with Hubble's names (hubble-metrics-server; internal/flowmetrics, a
// flow.Sink of the flow store). Either address may be "" (off).
type agentMetrics struct {
	agent   *metrics.Agent
	flows   *flowmetrics.Sink // nil when the flow metrics are off
	servers []*http.Server
	health  atomic.Pointer[peerHealthLoop] // set once node health probing runs
	log     *slog.Logger
}

// startMetrics starts the endpoints the configuration asks for; a port in use is
// an error naming the key.
func startMetrics(conf config.Config, log *slog.Logger) (*agentMetrics, error) {
	m := &agentMetrics{agent: metrics.NewAgent(), log: log}
	if conf.PrometheusServeAddr != "" {
		srv, err := metrics.Serve(conf.PrometheusServeAddr, "prometheus-serve-addr", m.agent.Registry(), log)
		if err != nil {
			return nil, err
		}
		m.servers = append(m.servers, srv)
	}
	if conf.HubbleMetricsServer != "" {
		m.flows = flowmetrics.New(conf.HubbleMetrics, flowmetrics.Options{})
		srv, err := metrics.Serve(conf.HubbleMetricsServer, "hubble-metrics-server", m.flows.Registry(), log)
		if err != nil {
			m.close()
			return nil, err
		}
		m.servers = append(m.servers, srv)
	}
	return m, nil
}

func (m *agentMetrics) close() {
	for _, s := range m.servers {
		_ = s.Close()
	}
}

// use makes the agent endpoint report the loaded datapath and the parts around it
// (the Service and policy loops among them) from now on (every scrape reads them afresh, but for the map fills: one count
// answers scrapes for metrics.MapStatsMaxAge), and the flow store feed the flow
// metrics.
func (m *agentMetrics) use(st *startup, node *nodeDatapath, svc *serviceLoop, pol *policyLoop, gc *collector, flows *flowLoop) {
	plan := st.plan
	maps := metrics.NewMapCache(node.dp.MapStats, metrics.MapStatsMaxAge, m.log)
	m.agent.Use(func() metrics.Snapshot {
		s := metrics.Snapshot{Datapath: true, Endpoints: len(node.eps.List()), RetiredVeths: node.eps.Reaper().Len(),
			RoutingMode: plan.RoutingMode(), HostRouting: plan.HostRouting.Mode(), HostRoutingReason: plan.HostRouting.Reason,
			AttachErrors: node.dp.AttachErrors(), Controllers: st.loops.controllers(), GC: gc.stats.snapshot(),
			PolicyEvents: pol.events.counts(), FlowVerdictsSkipped: flows.verdicts.skipped.Load()}
		_, s.IPAMUsed, s.IPAMTotal = node.pool.Usage()
		if svc != nil {
			n, fe, be := svc.manager.Counts()
			s.Services = &metrics.ServiceCounts{Services: n, Frontends: fe, Backends: be}
		}
		// A map that cannot be counted keeps its last count (MapCache); counters
		// that cannot be read are left out of this scrape (and the read error
		// shows in myelin status, which reads the same map).
		s.Maps = maps.Samples()
		s.Counters, _ = node.dp.Metrics()
		s.ICMPRejectsSuppressed, _ = node.dp.ICMPRejectsSuppressed()
		if ev, err := node.dp.PolicyCTEvictions(); err == nil {
			s.PolicyCTEvictions = &ev
		}
		if ph := m.health.Load(); ph != nil {
			s.NodeHealth = clusterhealth.Samples(ph.prober.Matrix.Peers())
		}
		return s
	})
	if m.flows != nil && node.flows != nil {
		node.flows.AddSink(m.flows) // every flow the store takes, counted (flowmetrics)
	}
	if svc != nil {
		svc.watcher.OnSyncLatency(func(d time.Duration) { m.agent.ObserveSync("services", d) })
	}
}
