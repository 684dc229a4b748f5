package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
)

// The node's modes are decided once, from the configuration and the node's facts,
// without touching the node.
func TestDecidePlan(t *testing.T) {
	all := datapath.Features{TCX: true, RedirectPeer: true, RedirectNeigh: true, FibLookup: true, RingBuf: true}
	podCIDR := netip.MustParsePrefix("10.244.1.0/24")
	in := planInputs{Node: "n1", NodeIP: netip.MustParseAddr("198.18.0.11"), PodCIDR: podCIDR, Features: all,
		Ephemeral: config.PortRange{Min: 32768, Max: 60999}, UplinkMTU: 1500}
	noIP, noTCX := in, in
	noIP.NodeIP = netip.Addr{}
	noTCX.Features.TCX = false
	for _, tt := range []struct {
		name   string
		values map[string]string
		in     planInputs
		check  func(nodePlan) bool
		err    string
	}{
		{"defaults", nil, in, func(p nodePlan) bool {
			return p.Tunnel && p.HostRouting.BPF && p.Masquerade == masqueradeBPF && p.KubeProxyReplacement &&
				p.MTU == 1500 && p.RouteMTU == 1450 && p.NATPorts == config.PortRange{Min: 61000, Max: 65535} &&
				p.AttachMode == "tcx" && p.RoutingMode() == "tunnel" && p.SourceValidation
		}, ""},
		{"native", map[string]string{"routing-mode": "native"}, in, func(p nodePlan) bool {
			return !p.Tunnel && p.RouteMTU == 1500 && p.RoutingMode() == "native"
		}, ""},
		{"tunnel", map[string]string{"routing-mode": "tunnel"}, in, func(p nodePlan) bool {
			return p.Tunnel && p.RouteMTU == 1450 && p.RoutingMode() == "tunnel"
		}, ""},
		{"tunnel in BPF", nil, in, func(p nodePlan) bool {
			who, _ := p.tunnelDatapath("default")
			return p.BPFTunnel && who == "BPF" && p.datapathConfig("/pins").TunnelPort == 8472
		}, ""},
		{"tunnel by the device", map[string]string{"enable-bpf-tunnel": "false"}, in, func(p nodePlan) bool {
			who, why := p.tunnelDatapath("ConfigMap")
			return p.Tunnel && p.HostRouting.BPF && !p.BPFTunnel && who == "myelin_vxlan" &&
				strings.Contains(why, "enable-bpf-tunnel is false (ConfigMap)") && p.datapathConfig("/pins").TunnelPort == 0
		}, ""},
		{"tunnel with legacy host routing", map[string]string{"host-routing": "legacy"}, in, func(p nodePlan) bool {
			who, why := p.tunnelDatapath("default")
			return !p.BPFTunnel && who == "myelin_vxlan" && why == "legacy host routing" && p.datapathConfig("/pins").TunnelPort == 0
		}, ""},
		{"native has no tunnel datapath", map[string]string{"routing-mode": "native"}, in, func(p nodePlan) bool {
			who, _ := p.tunnelDatapath("default")
			return !p.BPFTunnel && who == ""
		}, ""},
		{"tunnel without a node IP", map[string]string{"routing-mode": "tunnel"}, noIP, nil, "no IPv4 InternalIP"},
		{"tunnel-pod-to-node plain by default", nil, in, func(p nodePlan) bool {
			return p.TunnelPodToNode == config.TunnelPodToNodePlain && p.datapathConfig("/pins").TunnelPodToNode == datapath.TunnelPodToNodePlain &&
				strings.Contains(p.otherNodesPods("default"), "their plain packets to this node's IP are not (tunnel-pod-to-node is plain, default)")
		}, ""},
		{"tunnel-pod-to-node encapsulate", map[string]string{"tunnel-pod-to-node": "encapsulate"}, in, func(p nodePlan) bool {
			return p.datapathConfig("/pins").TunnelPodToNode == datapath.TunnelPodToNodeEncapsulate &&
				strings.Contains(p.otherNodesPods("cm"), "are counted (PLAIN_POD_TO_NODE), not dropped (tunnel-pod-to-node is encapsulate, cm)")
		}, ""},
		{"tunnel-pod-to-node enforce with the device tunnelling", map[string]string{"tunnel-pod-to-node": "enforce", "enable-bpf-tunnel": "false"}, in, func(p nodePlan) bool {
			return p.datapathConfig("/pins").TunnelPodToNode == datapath.TunnelPodToNodeEnforce &&
				strings.HasPrefix(p.otherNodesPods("cm"), "only through the overlay")
		}, ""},
		{"native routing says nothing of other nodes' pods", map[string]string{"routing-mode": "native"}, in, func(p nodePlan) bool {
			return p.otherNodesPods("default") == ""
		}, ""},
		{"tunnel-pod-to-node in native routing", map[string]string{"tunnel-pod-to-node": "encapsulate", "routing-mode": "native"}, in, nil,
			"tunnel-pod-to-node is encapsulate (cm) but routing-mode is native"},
		{"tunnel-pod-to-node with legacy host routing", map[string]string{"tunnel-pod-to-node": "enforce", "host-routing": "legacy"}, in, func(p nodePlan) bool {
			return !p.HostRouting.BPF && p.datapathConfig("/pins").TunnelPodToNode == datapath.TunnelPodToNodeEnforce
		}, ""},
		{"tunnel-pod-to-node without health probes", map[string]string{"tunnel-pod-to-node": "encapsulate", "cluster-health-port": "0"}, in, nil,
			"tunnel-pod-to-node is encapsulate (cm) but cluster-health-port is 0"},
		{"iptables masquerade", map[string]string{"enable-bpf-masquerade": "false"}, in, func(p nodePlan) bool {
			return p.Masquerade == masqueradeIPTables && !p.HostRouting.BPF
		}, ""},
		{"no masquerade", map[string]string{"enable-ipv4-masquerade": "false"}, in, func(p nodePlan) bool {
			return p.Masquerade == masqueradeOff && p.Masquerade.String() == "disabled"
		}, ""},
		{"maglev", map[string]string{"lb-algorithm": "maglev"}, in, func(p nodePlan) bool {
			return p.MaglevTableSize > 0 && p.datapathConfig("/pins").MaglevTableSize == uint32(p.MaglevTableSize)
		}, ""},
		{"policy connection budget: auto", map[string]string{"policy-ct-max": "8192"}, in, func(p nodePlan) bool {
			d := p.datapathConfig("/pins")
			return d.PolicyCTMax == 8192 && d.PolicyCTPodMax == 2048 && d.NATPodMax == 8192 && d.LBCTPodMax == 32768
		}, ""},
		{"policy connection budget off", map[string]string{"policy-ct-pod-max": "0"}, in, func(p nodePlan) bool {
			return p.datapathConfig("/pins").PolicyCTPodMax == 0
		}, ""},
		{"masquerade budget: auto and set", map[string]string{"nat-pod-max": "100"}, in, func(p nodePlan) bool {
			return p.datapathConfig("/pins").NATPodMax == 100
		}, ""},
		{"random has no Maglev table", nil, in, func(p nodePlan) bool { return p.MaglevTableSize == 0 }, ""},
		{"explicit MTU", map[string]string{"mtu": "1400"}, in, func(p nodePlan) bool { return p.MTU == 1400 }, ""},
		{"tc attach", nil, noTCX, func(p nodePlan) bool { return p.AttachMode == "tc" && !p.HostRouting.BPF }, ""},
		{"NAT ports overlap", map[string]string{"nat-port-range": "60000-65535"}, in, nil, "overlaps"},
		{"bpf host routing refused", map[string]string{"host-routing": "bpf", "kube-proxy-replacement": "false"}, in, nil, "host-routing is bpf"},
		// The uplink drops this node's pod addresses where none of its pods' packets can
		// come back; each key that lets one leave with its address turns that off, named.
		{"uplink pod check", nil, in, func(p nodePlan) bool {
			return p.UplinkPodCIDR == podCIDR && p.datapathConfig("/pins").LocalPodCIDR == podCIDR &&
				sourceCheck(p, "default") == api.SourceCheckInfo{Enabled: true, UplinkPodCIDR: "10.244.1.0/24"}
		}, ""},
		{"uplink pod check: native CIDR the cluster's", map[string]string{"routing-mode": "native", "ipv4-native-routing-cidr": "10.244.0.0/16"}, in,
			func(p nodePlan) bool {
				return p.datapathConfig("/pins").LocalPodCIDR == podCIDR && p.UplinkPodCheckOff == ""
			}, ""},
		{"uplink pod check: a non-masquerade CIDR inside the cluster's", map[string]string{"non-masquerade-cidrs": "10.244.8.0/21"}, in,
			func(p nodePlan) bool { return p.datapathConfig("/pins").LocalPodCIDR == podCIDR }, ""},
		{"uplink pod check off: masquerade", map[string]string{"enable-ipv4-masquerade": "false"}, in,
			uplinkPodCheckOff("enable-ipv4-masquerade is false"), ""},
		{"uplink pod check off: non-masquerade-cidrs", map[string]string{"non-masquerade-cidrs": "192.168.0.0/16"}, in,
			uplinkPodCheckOff("pods reach 192.168.0.0/16 (ipv4-native-routing-cidr or non-masquerade-cidrs), beyond cluster-cidr 10.244.0.0/16"), ""},
		{"uplink pod check off: a wider native CIDR", map[string]string{"routing-mode": "native", "ipv4-native-routing-cidr": "10.0.0.0/8"}, in,
			uplinkPodCheckOff("pods reach 10.0.0.0/8 (ipv4-native-routing-cidr"), ""},
		{"uplink pod check off: source validation", map[string]string{"enable-source-ip-verification": "false"}, in,
			uplinkPodCheckOff("enable-source-ip-verification is false"), ""},
		// pod-source-from-hosts decides it outright where the operator knows better.
		{"uplink pod check off: allow", map[string]string{"pod-source-from-hosts": "allow"}, in,
			uplinkPodCheckOff("pod-source-from-hosts is allow"), ""},
		{"uplink pod check: drop with masquerade off", map[string]string{"pod-source-from-hosts": "drop", "enable-ipv4-masquerade": "false",
			"routing-mode": "native", "ipv4-native-routing-cidr": "10.0.0.0/8"}, in, uplinkPodCheckOn(podCIDR), ""},
		{"uplink pod check: drop with source validation off", map[string]string{"pod-source-from-hosts": "drop", "enable-source-ip-verification": "false"}, in,
			func(p nodePlan) bool {
				return uplinkPodCheckOn(podCIDR)(p) && sourceCheck(p, "ConfigMap").Warning != ""
			}, ""},
		{"datapath config", map[string]string{"enable-source-ip-verification": "false"}, in, func(p nodePlan) bool {
			d := p.datapathConfig("/pins")
			return d.PinDir == "/pins" && d.HostRouting == datapath.HostRoutingBPF && d.Masquerade && d.LoadBalancing &&
				d.NoSourceVerification && d.NATPortMin == 61000 && d.NodeIP == in.NodeIP
		}, ""},
	} {
		c, err := config.Resolve(config.Source{Name: "cm", Values: tt.values})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		p, err := decidePlan(c, tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want one containing %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !tt.check(p) {
			t.Errorf("%s: plan = %+v, %v", tt.name, p, err)
		}
	}
}

// uplinkPodCheckOn checks that the plan loads podCIDR for the uplink's pod address
// check, and status says so.
func uplinkPodCheckOn(podCIDR netip.Prefix) func(nodePlan) bool {
	return func(p nodePlan) bool {
		st := sourceCheck(p, "ConfigMap")
		return p.UplinkPodCIDR == podCIDR && p.datapathConfig("/pins").LocalPodCIDR == podCIDR && p.UplinkPodCheckOff == "" &&
			st.UplinkPodCIDR == podCIDR.String() && st.UplinkOff == ""
	}
}

// uplinkPodCheckOff checks that the plan leaves the uplink's pod address check off,
// loads no PodCIDR for it, and says why (why).
func uplinkPodCheckOff(why string) func(nodePlan) bool {
	return func(p nodePlan) bool {
		st := sourceCheck(p, "ConfigMap")
		return !p.UplinkPodCIDR.IsValid() && !p.datapathConfig("/pins").LocalPodCIDR.IsValid() && strings.HasPrefix(p.UplinkPodCheckOff, why) &&
			st.UplinkPodCIDR == "" && st.UplinkOff == p.UplinkPodCheckOff
	}
}
