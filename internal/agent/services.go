package agent

import (
	"context"
	"fmt"
	"net/http"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/healthcheck"
	"github.com/myelin-net/myelin/internal/service"
)

// startServices adopts the Service maps left by a previous run and starts the watcher
// that keeps them in step with the cluster (kube-proxy-replacement). With
// kube-proxy-replacement false it does nothing: kube-proxy serves Services and the
// datapath was loaded without load balancing.
func (a *agent) startServices(ctx context.Context) error {
	if !a.plan.KubeProxyReplacement {
		return nil
	}
	m, err := service.NewManager(a.dp, a.plan.MaglevTableSize)
	if err != nil {
		return fmt.Errorf("adopt the service maps: %w", err)
	}
	a.services = m
	a.svcWatch = service.NewWatcher(a.cs, m, service.Options{NodeName: a.cfg.Node, NodeIP: a.plan.NodeIP},
		func(err error) { a.loops.report("services", err) }, a.log)
	a.startHealthChecks(ctx)
	go a.svcWatch.Run(ctx)
	return nil
}

// startHealthChecks serves the healthCheckNodePorts of externalTrafficPolicy: Local
// Services, fed by the Service watcher (kube-proxy serves them when it runs instead).
// Answers are 503 until the watcher's first full pass, as kube-proxy's are until it
// has synced.
func (a *agent) startHealthChecks(ctx context.Context) {
	synced := func() bool {
		select {
		case <-a.svcWatch.Synced():
			return true
		default:
			return false
		}
	}
	a.healthChecks = healthcheck.New(synced, func(err error) { a.loops.report("health-check-ports", err) },
		a.log.With("loop", "health-check-ports"))
	a.svcWatch.OnHealthCheck(a.healthChecks.Update)
	go a.healthChecks.Run(ctx)
}

// servedBy says who implements Services on this node, for status.
func (a *agent) servedBy() string {
	if !a.plan.KubeProxyReplacement {
		return "kube-proxy (kube-proxy-replacement is false)"
	}
	if a.services == nil {
		return "myelin (starting)"
	}
	svcs, frontends, backends := a.services.Counts()
	hcPorts := 0
	if a.healthChecks != nil {
		hcPorts = len(a.healthChecks.Ports())
	}
	return fmt.Sprintf("myelin (kube-proxy-replacement, %s): %d services, %d frontends, %d backends, %d health check ports",
		a.plan.LBAlgorithm, svcs, frontends, backends, hcPorts)
}

func (a *agent) handleServices(w http.ResponseWriter, _ *http.Request) {
	out := api.Services{Node: a.cfg.Node, ServedBy: "kube-proxy", Frontends: []api.ServiceFrontend{}}
	if !a.plan.KubeProxyReplacement {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.ServedBy, out.Algorithm = "myelin", a.plan.LBAlgorithm
	if a.services == nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent on node %s is starting", a.cfg.Node))
		return
	}
	select {
	case <-a.svcWatch.Synced():
		out.Synced = true
	default:
	}
	for _, s := range a.services.Snapshot() {
		f := api.ServiceFrontend{Service: s.Service, Port: s.PortName, Type: string(s.Type),
			Frontend: service.FrontendString(s.Key), ID: s.ID, Backends: []api.ServiceBackend{}}
		if s.Affinity > 0 {
			f.Affinity = s.Affinity.String()
		}
		for _, b := range s.Active {
			f.Backends = append(f.Backends, api.ServiceBackend{Address: b.String(), ID: s.BackendIDs[b], State: "active"})
		}
		for _, b := range s.Terminating {
			f.Backends = append(f.Backends, api.ServiceBackend{Address: b.String(), ID: s.BackendIDs[b], State: "terminating"})
		}
		out.Frontends = append(out.Frontends, f)
	}
	writeJSON(w, http.StatusOK, out)
}
