package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// natFullPercent is the fill from which a NAT table gets a status warning.
const natFullPercent = 90

// natStatus is the NAT section of the status: the NAT ports, the NodePort
// SNAT counters and warnings for full NAT tables (fills from MapFill).
func (v datapathView) natStatus(fills []datapath.MapFill) api.NATInfo {
	info := api.NATInfo{Ports: v.plan.NATPorts.String(), Warnings: natWarnings(fills)}
	info.Warnings = append(info.Warnings, v.natBudgetWarnings()...)
	if !v.plan.KubeProxyReplacement {
		return info
	}
	if st, err := v.dp.NodePortStats(); err == nil {
		info.NodePort = nodePortInfo(st)
		if n := v.gc.npEvictions.since(time.Now(), info.NodePort.Evicted); n > 0 {
			info.Warnings = append(info.Warnings, fmt.Sprintf(
				"myelin_nodeport_syn evicted %d embryonic NodePort flows in the last minute (a SYN flood?): clients slower than the churn retry their SYN; established flows and masquerade are unaffected", n))
		}
	}
	return info
}

// podName names a local pod by address, or shows the address.
func (v datapathView) podName(ip netip.Addr) string {
	if v.names != nil {
		if name := v.names(ip); name != "" {
			return name
		}
	}
	return ip.String()
}

// natBudgetWarnings names each pod over its share of myelin_snat (nat-pod-max)
// or myelin_lb_ct (lb-ct-pod-max) and what that does to its new flows.
func (v datapathView) natBudgetWarnings() []string {
	over, err := v.dp.PodsOverBudget()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ip := range slices.SortedFunc(maps.Keys(over.NAT), netip.Addr.Compare) {
		out = append(out, fmt.Sprintf("pod %s held %d masqueraded flows, over nat-pod-max %d: its new flows out of the cluster are dropped (DROP_NAT_BUDGET) until it holds fewer",
			v.podName(ip), over.NAT[ip], over.NATMax))
	}
	for _, ip := range slices.SortedFunc(maps.Keys(over.ServiceCT), netip.Addr.Compare) {
		out = append(out, fmt.Sprintf("pod %s held %d Service flows, over lb-ct-pod-max %d: its new Service flows are dropped (DROP_SVC_CT_BUDGET) until it holds fewer",
			v.podName(ip), over.ServiceCT[ip], over.ServiceCTMax))
	}
	return out
}

// evictionWindow is how far back status looks for embryonic NodePort evictions.
const evictionWindow = time.Minute

// evictionSamples keeps the estimated evictions of the embryonic NodePort
// table as sampled by the NAT GC loop over the last evictionWindow: an LRU
// never reads as full reliably (the kernel evicts in batches), but a
// growing eviction count is the pressure.
type evictionSamples struct {
	mu      sync.Mutex
	samples []evictionSample
}

type evictionSample struct {
	at      time.Time
	evicted uint64
}

// add records the evictions at now and forgets samples older than the window.
func (e *evictionSamples) add(now time.Time, evicted uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples = append(e.samples, evictionSample{now, evicted})
	for len(e.samples) > 1 && now.Sub(e.samples[0].at) > evictionWindow {
		e.samples = e.samples[1:]
	}
}

// since returns how many evictions happened since the oldest sample of the
// window (0 without samples).
func (e *evictionSamples) since(now time.Time, evicted uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.samples {
		if now.Sub(s.at) <= evictionWindow+gcInterval && evicted > s.evicted {
			return evicted - s.evicted
		}
	}
	return 0
}

// sampleEvictions records the embryonic NodePort evictions for status.
func (c *collector) sampleEvictions(dp *datapath.Datapath) {
	st, err := dp.NodePortStats()
	if err != nil {
		return
	}
	c.npEvictions.add(time.Now(), nodePortInfo(st).Evicted)
}

// nodePortInfo turns the NodePort counters into status, with the evictions
// estimated from the flows still in myelin_nodeport_syn.
func nodePortInfo(st datapath.NodePortStats) *api.NodePortNATInfo {
	info := &api.NodePortNATInfo{Created: st.Created, Promoted: st.Promoted, UDPAnswered: st.UDPAnswered, RepliesLost: st.RepliesLost}
	if left := st.Promoted + st.UDPAnswered + st.Embryonic; st.Created > left {
		info.Evicted = st.Created - left
	}
	return info
}

// natWarnings names the NAT tables at least natFullPercent full and what
// their filling does to traffic.
func natWarnings(fills []datapath.MapFill) []string {
	effect := map[string]string{
		"myelin_snat":         "new masqueraded flows are dropped as DROP_NAT_FULL until idle ones are collected",
		"myelin_nodeport_syn": "new NodePort flows evict embryonic ones (a SYN flood?); established flows and masquerade are unaffected",
		"myelin_nodeport_nat": "NodePort flows completing their handshake are dropped as DROP_NODEPORT_NAT_FULL until idle ones are collected",
		"myelin_nodeport_udp": "newly answered NodePort UDP flows evict idle ones (a flood of answered datagrams?); TCP flows and masquerade are unaffected",
	}
	var out []string
	for _, f := range fills {
		e, ok := effect[f.Name]
		if !ok || f.Max == 0 || f.Entries*100 < f.Max*natFullPercent {
			continue
		}
		out = append(out, fmt.Sprintf("%s is %d%% full (%d/%d): %s", f.Name, f.Entries*100/f.Max, f.Entries, f.Max, e))
	}
	return out
}
