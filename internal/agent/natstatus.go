package agent

import (
	"fmt"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// natFullPercent is the fill from which a NAT table gets a status warning.
const natFullPercent = 90

// natStatus is the NAT section of the status: the NAT ports, the NodePort
// SNAT counters and warnings for full NAT tables (fills from MapFill).
func (a *agent) natStatus(fills []datapath.MapFill) api.NATInfo {
	info := api.NATInfo{Ports: a.natPorts.String(), Warnings: natWarnings(fills)}
	if !a.conf.KubeProxyReplacement {
		return info
	}
	if st, err := a.dp.NodePortStats(); err == nil {
		info.NodePort = nodePortInfo(st, fills)
	}
	return info
}

// nodePortInfo turns the NodePort counters into status, with the evictions
// estimated from the flows still in myelin_nodeport_syn (two entries each).
func nodePortInfo(st datapath.NodePortStats, fills []datapath.MapFill) *api.NodePortNATInfo {
	info := &api.NodePortNATInfo{Created: st.Created, Promoted: st.Promoted, RepliesLost: st.RepliesLost}
	left := st.Promoted
	for _, f := range fills {
		if f.Name == "myelin_nodeport_syn" {
			left += uint64(f.Entries / 2)
		}
	}
	if st.Created > left {
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
