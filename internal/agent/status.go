package agent

import (
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/iptables"
)

// status is GET /v1/status: the endpoints and IPAM the server owns, then the
// section of every registered view.
func (a *server) status() api.Status {
	s := api.Status{Node: a.cfg.Node, Endpoints: len(a.eps.List())}
	cidr, used, total := a.pool.Usage()
	s.IPAM = api.IPAMInfo{CIDR: cidr.String(), Used: used, Total: total}
	a.views.fillStatus(&s)
	return s
}

// nodeView shows the node's plan and configuration, decided at start: ready from
// the first request.
type nodeView struct {
	node    string
	uplink  string
	conf    config.Config // what GET /v1/config shows; modes come from plan
	plan    nodePlan
	started time.Time
}

func (v nodeView) fillStatus(s *api.Status) {
	p := v.plan
	s.Config = api.ConfigInfo{Sources: v.conf.SourceSummary(), Warning: v.conf.Warning()}
	s.Started = v.started
	s.Datapath = api.DatapathInfo{Device: "veth", AttachMode: p.AttachMode, Uplink: v.uplink}
	s.Routing.Mode, s.Routing.AutoDirectNodeRoutes = p.RoutingMode(), p.AutoDirectNodeRoutes
	s.Routing.HostRouting, s.Routing.HostRoutingReason = p.HostRouting.Mode(), p.HostRouting.Reason
	s.Routing.Tunnel, s.Routing.TunnelReason = p.tunnelDatapath(v.conf.Source("enable-bpf-tunnel"))
	s.Masquerade = p.Masquerade.String()
	s.SourceCheck = sourceCheck(p, v.conf.Source("enable-source-ip-verification"))
	s.SourceCheck.OtherNodesPods = p.otherNodesPods(v.conf.Source("tunnel-pod-to-node"))
	s.MTU = api.MTUInfo{Device: p.MTU, Route: p.RouteMTU}
	s.BIGTCP = api.BIGTCPInfo{Enabled: p.BIGTCP.Enabled, Size: p.BIGTCP.Size, Devices: p.BIGTCP.Devices, Reason: p.BIGTCP.Reason}
	if p.KubeProxyReplacement {
		s.KubeProxy = "myelin (starting)" // until the Services loop registers
	}
}

func (v nodeView) configView() api.ConfigView {
	out := api.ConfigView{Node: v.node, Warning: v.conf.Warning()}
	for _, e := range v.conf.Effective {
		out.Effective = append(out.Effective, api.ConfigEntry{Key: e.Key, Value: e.Value, Source: e.Source})
	}
	return out
}

// kubeProxyServices is the Services view with kube-proxy-replacement false:
// kube-proxy serves them.
type kubeProxyServices struct{ node string }

func (k kubeProxyServices) fillStatus(s *api.Status) {
	s.KubeProxy = "kube-proxy (kube-proxy-replacement is false)"
}

func (k kubeProxyServices) writeServicesView(w io.Writer) error {
	return writeServices(w, api.Services{Node: k.node, ServedBy: "kube-proxy"}, func(func(api.ServiceFrontend) error) error { return nil })
}

func (s *serviceLoop) fillStatus(st *api.Status) { st.KubeProxy = s.servedBy() }

func (r *routeStatus) fillStatus(s *api.Status) {
	s.Routing.Routes = int(r.routes.Load())
	if u := r.unroutable.Load(); u != nil {
		s.Routing.Unroutable = *u
	}
	s.Nodes = api.NodesInfo{Known: int(r.nodesKnown.Load())}
}

// fillStatus shows every loop's last run and, from the loop "kubernetes", whether the
// apiserver answers.
func (l *loops) fillStatus(s *api.Status) {
	s.Loops = l.snapshot()
	s.Kubernetes.Connected = true
	for _, l := range s.Loops {
		if l.Name == "kubernetes" && l.LastError != "" && l.ErrorTime.Equal(l.LastRun) {
			s.Kubernetes.Connected, s.Kubernetes.Error = false, l.LastError
		}
	}
}

func (k *kubeLoop) fillStatus(s *api.Status) { s.Kubernetes.Version = k.serverVersion() }

func (g *guardState) fillStatus(s *api.Status) { s.Guard = g.status() }

// datapathView shows the loaded datapath: its map fills, NAT and counters.
type datapathView struct {
	dp   *datapath.Datapath
	plan nodePlan
	gc   *collector // its eviction samples
	// names names a local pod by address (the endpoints), for the NAT budget's
	// warnings; nil or "" shows the address.
	names func(netip.Addr) string
}

func (v datapathView) fillStatus(s *api.Status) {
	fills, err := v.dp.MapFill()
	if err == nil {
		for _, f := range fills {
			s.Maps = append(s.Maps, api.MapFill{Name: f.Name, Entries: f.Entries, Max: f.Max})
		}
	}
	s.NAT = v.natStatus(fills)
	if metrics, err := v.dp.Metrics(); err == nil {
		for _, m := range metrics {
			s.Counters = append(s.Counters, api.Counter{Direction: m.Direction, Reason: m.Reason, Packets: m.Packets, Bytes: m.Bytes})
		}
	}
	// Rejects over the ICMP rate: counted as DROP_SVC_NO_BACKEND, left unanswered.
	if n, err := v.dp.ICMPRejectsSuppressed(); err == nil && n > 0 {
		s.Counters = append(s.Counters, api.Counter{Direction: "any", Reason: "ICMP_REJECT_SUPPRESSED", Packets: n})
	}
}

// sourceCheck reports enable-source-ip-verification, loudly when it is off, and
// whether this node's pod addresses are dropped when other hosts send them (on the
// uplink, or into a pod from another device). source names who set the key.
func sourceCheck(p nodePlan, source string) api.SourceCheckInfo {
	s := api.SourceCheckInfo{Enabled: p.SourceValidation, UplinkOff: p.UplinkPodCheckOff}
	if p.UplinkPodCIDR.IsValid() {
		s.UplinkPodCIDR = p.UplinkPodCIDR.String()
	}
	if !p.SourceValidation {
		s.Warning = "pods can send from any address and MAC (enable-source-ip-verification is false, set by " +
			source + "); turn it off only to measure its cost"
	}
	return s
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
