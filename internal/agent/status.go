package agent

import (
	"net/http"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/iptables"
)

func (a *server) status() api.Status {
	s := api.Status{
		Node:     a.cfg.Node,
		Config:   api.ConfigInfo{Sources: a.conf.SourceSummary(), Warning: a.conf.Warning()},
		Started:  a.started,
		Datapath: api.DatapathInfo{Device: "veth", AttachMode: a.plan.AttachMode, Uplink: a.cfg.Uplink},
		Routing: api.RoutingInfo{
			Mode: a.plan.RoutingMode(), HostRouting: a.plan.HostRouting.Mode(), HostRoutingReason: a.plan.HostRouting.Reason,
			AutoDirectNodeRoutes: a.plan.AutoDirectNodeRoutes, Routes: int(a.routes.routes.Load()),
		},
		Masquerade:  a.plan.Masquerade.String(),
		SourceCheck: sourceCheck(a.plan.SourceValidation, a.conf.Source("enable-source-ip-verification")),
		KubeProxy:   a.servedBy(),
		MTU:         api.MTUInfo{Device: a.plan.MTU, Route: a.plan.RouteMTU},
		Endpoints:   len(a.eps.List()),
		Nodes:       api.NodesInfo{Known: int(a.routes.nodesKnown.Load())},
		Loops:       a.loops.snapshot(),
		Guard:       a.guard.status(),
	}
	if u := a.routes.unroutable.Load(); u != nil {
		s.Routing.Unroutable = *u
	}
	cidr, used, total := a.pool.Usage()
	s.IPAM = api.IPAMInfo{CIDR: cidr.String(), Used: used, Total: total}
	s.Kubernetes.Connected = true
	for _, l := range s.Loops {
		if l.Name == "kubernetes" && l.LastError != "" && l.ErrorTime.Equal(l.LastRun) {
			s.Kubernetes.Connected, s.Kubernetes.Error = false, l.LastError
		}
	}
	s.Kubernetes.Version = a.kube.serverVersion()
	fills, err := a.dp.MapFill()
	if err == nil {
		for _, f := range fills {
			s.Maps = append(s.Maps, api.MapFill{Name: f.Name, Entries: f.Entries, Max: f.Max})
		}
	}
	s.NAT = a.natStatus(fills)
	if metrics, err := a.dp.Metrics(); err == nil {
		for _, m := range metrics {
			s.Counters = append(s.Counters, api.Counter{Direction: m.Direction, Reason: m.Reason, Packets: m.Packets, Bytes: m.Bytes})
		}
	}
	// Rejects over the ICMP rate: counted as DROP_SVC_NO_BACKEND, left unanswered.
	if n, err := a.dp.ICMPRejectsSuppressed(); err == nil && n > 0 {
		s.Counters = append(s.Counters, api.Counter{Direction: "any", Reason: "ICMP_REJECT_SUPPRESSED", Packets: n})
	}
	return s
}

// sourceCheck reports enable-source-ip-verification, loudly when it is off.
// source names who set it.
func sourceCheck(on bool, source string) api.SourceCheckInfo {
	if on {
		return api.SourceCheckInfo{Enabled: true}
	}
	return api.SourceCheckInfo{Warning: "pods can send from any address and MAC (enable-source-ip-verification is false, set by " +
		source + "); turn it off only to measure its cost"}
}

// String is the masquerade mode as status shows it.
func (m masqueradeMode) String() string {
	switch m {
	case masqueradeOff:
		return "disabled"
	case masqueradeBPF:
		return "BPF (myelin_to_netdev)"
	default:
		return "iptables (nat/" + iptables.MasqueradeChain + ")"
	}
}

func (a *server) handleStatus(w http.ResponseWriter, _ *http.Request) {
	if a.eps == nil {
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: "agent is starting"})
		return
	}
	writeJSON(w, http.StatusOK, a.status())
}
