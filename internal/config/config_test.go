package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"testing"
)

func TestResolveDefaults(t *testing.T) {
	c, err := Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.RoutingMode != RoutingTunnel || c.HostRouting != HostRoutingAuto || !c.EnableBPFMasquerade ||
		c.TunnelPort != 8472 || c.MaglevTableSize != 16381 || c.UserIPTablesGuard != GuardRefuse ||
		!c.EnableSourceIPVerification || !c.EnableBPFTunnel {
		t.Errorf("defaults = %+v", c)
	}
	if len(c.Effective) != len(keys) || c.Source("routing-mode") != DefaultSourceName {
		t.Errorf("effective = %+v", c.Effective)
	}
}

func TestResolveLayers(t *testing.T) {
	cm := Source{Name: "ConfigMap kube-system/myelin-config", Values: map[string]string{
		"routing-mode": "native", "auto-direct-node-routes": "true", "host-routing": "legacy",
		"non-masquerade-cidrs": "192.168.0.0/16, 172.16.0.0/12",
	}}
	c, err := Resolve(cm)
	if err != nil {
		t.Fatal(err)
	}
	if c.RoutingMode != RoutingNative || !c.AutoDirectNodeRoutes || c.HostRouting != HostRoutingLegacy {
		t.Errorf("config = %+v", c)
	}
	if len(c.NonMasqueradeCIDRs) != 2 || c.NonMasqueradeCIDRs[1].String() != "172.16.0.0/12" {
		t.Errorf("non-masquerade-cidrs = %v", c.NonMasqueradeCIDRs)
	}
	if c.Source("host-routing") != cm.Name || c.Source("mtu") != DefaultSourceName {
		t.Errorf("sources: host-routing from %q, mtu from %q", c.Source("host-routing"), c.Source("mtu"))
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		values map[string]string
		want   string
	}{
		{map[string]string{"routing-mod": "native"}, `src: unknown key "routing-mod"; known keys: auto-direct-node-routes,`},
		{map[string]string{"routing-mode": "fast"}, `src: key "routing-mode" value "fast": must be one of native, tunnel`},
		{map[string]string{"tunnel-port": "70000"}, `must be a UDP port number`},
		{map[string]string{"auto-direct-node-routes": "yes"}, `must be true or false`},
		{map[string]string{"cluster-cidr": "10.244.0.1/16"}, `did you mean 10.244.0.0/16?`},
		{map[string]string{"maglev-table-size": "16380"}, `must be a prime`},
		{map[string]string{"enable-bpf-tunnel": "device"}, `key "enable-bpf-tunnel" value "device": must be true or false`},
		{map[string]string{"enable-source-ip-verification": "off"}, `key "enable-source-ip-verification" value "off": must be true or false`},
		{map[string]string{"pod-source-from-hosts": "on"}, `key "pod-source-from-hosts" value "on": must be one of auto, drop, allow`},
		{map[string]string{"mtu": "500"}, `must be 0 (detect from the uplink) or between 1280 and 65535`},
		{map[string]string{"non-masquerade-cidrs": "10.0.0.0/8,bad"}, `"bad": must be an IPv4 CIDR`},
		{map[string]string{"ipv4-native-routing-cidr": "192.168.0.0/16"}, `does not contain the cluster CIDR`},
		{map[string]string{"nat-port-range": "61000"}, `must be auto or MIN-MAX`},
		{map[string]string{"nat-port-range": "65000-64000"}, `must be auto or MIN-MAX`},
		{map[string]string{"nat-port-range": "65000-65535"}, `at least 1024 ports`},
		{map[string]string{"nodeport-nat-syn-max": "8"}, `key "nodeport-nat-syn-max" value "8": must be a number of entries between 16 and`},
		{map[string]string{"nodeport-nat-max": "lots"}, `must be a number of entries`},
		{map[string]string{"policy-ct-max": "100"}, `key "policy-ct-max" value "100": must be a number of entries between 1024 and`},
		{map[string]string{"hubble-listen-address": "4244"}, `key "hubble-listen-address" value "4244": must be "" (off), :PORT or HOST:PORT such as :4244`},
		{map[string]string{"hubble-listen-address": "node:4244"}, `host "node" must be an IP address or localhost (e.g. 127.0.0.1:4244`},
		{map[string]string{"prometheus-serve-addr": "9962"}, `key "prometheus-serve-addr" value "9962": must be "" (off), :PORT or HOST:PORT`},
		{map[string]string{"hubble-metrics-server": "node1:9965"}, `host "node1" must be an IP address or localhost`},
		{map[string]string{"hubble-metrics": "dns,http"}, `key "hubble-metrics" value "dns,http": "http" needs an L7 proxy`},
	}
	for _, tt := range tests {
		_, err := Resolve(Source{Name: "src", Values: tt.values})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%v) = %v, want error containing %q", tt.values, err, tt.want)
		}
	}
}

// Source IP verification may be turned off per node (a NodeConfig) in native
// routing, so a benchmark can compare nodes with and without it in one cluster.
// In tunnel mode a node trusts the others' check of what they tunnel to it, so
// there a NodeConfig may not set it (to either value), while the ConfigMap may.
func TestSourceIPVerificationPerNode(t *testing.T) {
	cm := func(mode string) Source {
		return Source{Name: "ConfigMap kube-system/myelin-config", Values: map[string]string{"routing-mode": mode}}
	}
	node := Source{Name: "NodeConfig kube-system/no-source-check", PerNode: true,
		Values: map[string]string{"enable-source-ip-verification": "false"}}
	c, err := Resolve(cm("native"), node)
	if err != nil {
		t.Fatal(err)
	}
	if c.EnableSourceIPVerification || c.Source("enable-source-ip-verification") != node.Name {
		t.Errorf("enable-source-ip-verification = %v from %q, want false from %q",
			c.EnableSourceIPVerification, c.Source("enable-source-ip-verification"), node.Name)
	}
	for _, v := range []string{"false", "true"} {
		node.Values["enable-source-ip-verification"] = v
		_, err := Resolve(cm("tunnel"), node)
		want := `key "enable-source-ip-verification" is set by NodeConfig kube-system/no-source-check (value "` + v + `"): it must be the same on every node in tunnel mode`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "set it in the ConfigMap kube-system/myelin-config") {
			t.Errorf("tunnel mode, NodeConfig sets %s: %v, want an error containing %q", v, err, want)
		}
	}
	other := Source{Name: "NodeConfig kube-system/other", PerNode: true, Values: map[string]string{"enable-source-ip-verification": "true"}}
	node.Values["enable-source-ip-verification"] = "false"
	_, err = Resolve(cm("tunnel"), node, other)
	if want := `set by NodeConfig kube-system/no-source-check (value "false"), NodeConfig kube-system/other (value "true")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("tunnel mode, two NodeConfigs: %v, want an error containing %q", err, want)
	}
	all := cm("tunnel")
	all.Values["enable-source-ip-verification"] = "false"
	if c, err := Resolve(all); err != nil || c.EnableSourceIPVerification {
		t.Errorf("tunnel mode, ConfigMap sets false: verification %v, %v; want off, no error", c.EnableSourceIPVerification, err)
	}
}

func TestNATKeys(t *testing.T) {
	c, err := Resolve()
	if err != nil || !c.NATPortRange.IsZero() || c.NodePortNATSynMax != 16384 || c.NodePortNATMax != 65536 || c.NodePortNATUDPMax != 65536 {
		t.Fatalf("defaults: %+v %v, want auto range, 16384, 65536 and 65536", c, err)
	}
	c, err = Resolve(Source{Name: "nc", PerNode: true, Values: map[string]string{"nat-port-range": "20000-29999", "nodeport-nat-syn-max": "64", "nodeport-nat-udp-max": "128"}})
	if err != nil || c.NATPortRange != (PortRange{20000, 29999}) || c.NodePortNATSynMax != 64 || c.NodePortNATUDPMax != 128 {
		t.Errorf("per-node values: %+v %v", c, err)
	}
}

func TestNodeConfigMerge(t *testing.T) {
	cm := Source{Name: "ConfigMap kube-system/myelin-config", Values: map[string]string{"routing-mode": "native", "host-routing": "bpf"}}
	ncs := []NodeConfig{
		{Namespace: "kube-system", Name: "b-legacy", Defaults: map[string]string{"host-routing": "legacy", "mtu": "1400"},
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"migrate": "legacy"}}},
		{Namespace: "kube-system", Name: "a-all", Defaults: map[string]string{"mtu": "1450", "user-iptables-guard": "warn"}},
		{Namespace: "default", Name: "c-other", Defaults: map[string]string{"host-routing": "auto"},
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "other"}}},
	}
	tests := []struct {
		labels map[string]string
		want   map[string]string // key -> value@source
	}{
		{map[string]string{"migrate": "legacy"}, map[string]string{
			"host-routing":        "legacy@NodeConfig kube-system/b-legacy",
			"mtu":                 "1400@NodeConfig kube-system/b-legacy", // b applies after a
			"user-iptables-guard": "warn@NodeConfig kube-system/a-all",
			"routing-mode":        "native@ConfigMap kube-system/myelin-config",
			"tunnel-port":         "8472@default",
		}},
		{map[string]string{"pool": "other"}, map[string]string{
			"host-routing": "auto@NodeConfig default/c-other",
			"mtu":          "1450@NodeConfig kube-system/a-all",
		}},
		{nil, map[string]string{
			"host-routing": "bpf@ConfigMap kube-system/myelin-config",
			"mtu":          "1450@NodeConfig kube-system/a-all",
		}},
	}
	for _, tt := range tests {
		selected, err := SelectNodeConfigs(tt.labels, ncs)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Resolve(append([]Source{cm}, selected...)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Effective {
			if want, ok := tt.want[e.Key]; ok && want != e.Value+"@"+e.Source {
				t.Errorf("labels %v: %s = %s@%s, want %s", tt.labels, e.Key, e.Value, e.Source, want)
			}
		}
	}
}

func TestNodeConfigRefusals(t *testing.T) {
	for _, tt := range []struct {
		nc   NodeConfig
		want string
	}{
		{NodeConfig{Namespace: "ns", Name: "tp", Defaults: map[string]string{"tunnel-port": "9999"}},
			`NodeConfig ns/tp: key "tunnel-port" must be the same on every node; set it in the ConfigMap kube-system/myelin-config`},
		{NodeConfig{Namespace: "ns", Name: "cidr", Defaults: map[string]string{"cluster-cidr": "10.0.0.0/8"}}, `key "cluster-cidr" must be the same`},
		{NodeConfig{Namespace: "ns", Name: "typo", Defaults: map[string]string{"host-routng": "bpf"}}, `NodeConfig ns/typo: unknown key "host-routng"`},
		{NodeConfig{Namespace: "ns", Name: "bad", Defaults: map[string]string{"host-routing": "fast"}},
			`NodeConfig ns/bad: key "host-routing" value "fast": must be one of auto, bpf, legacy`},
	} {
		selected, err := SelectNodeConfigs(nil, []NodeConfig{tt.nc})
		if err == nil {
			_, err = Resolve(selected...)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.nc.Name, err, tt.want)
		}
	}
	bad := NodeConfig{Namespace: "ns", Name: "sel", NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}
	if _, err := SelectNodeConfigs(nil, []NodeConfig{bad}); err == nil || !strings.Contains(err.Error(), "NodeConfig ns/sel: bad spec.nodeSelector") {
		t.Errorf("invalid selector: %v", err)
	}
}

func TestPolicyCTMaxKey(t *testing.T) {
	c, err := Resolve()
	if err != nil || c.PolicyCTMax != 131072 {
		t.Fatalf("default policy-ct-max = %d (%v), want 131072", c.PolicyCTMax, err)
	}
	c, err = Resolve(Source{Name: "nc", PerNode: true, Values: map[string]string{"policy-ct-max": "1048576"}})
	if err != nil || c.PolicyCTMax != 1048576 {
		t.Errorf("policy-ct-max 1048576: got %d (%v)", c.PolicyCTMax, err)
	}
}

// policy-ct-pod-max: auto follows policy-ct-max (from any source), 0 is no budget.
func TestPolicyCTPodMaxKey(t *testing.T) {
	for _, c := range []struct {
		values map[string]string
		want   int
	}{
		{nil, 131072 / 4},
		{map[string]string{"policy-ct-max": "8192"}, 2048},
		{map[string]string{"policy-ct-pod-max": "0"}, 0},
		{map[string]string{"policy-ct-pod-max": "500", "policy-ct-max": "8192"}, 500},
	} {
		got, err := Resolve(Source{Name: "nc", PerNode: true, Values: c.values})
		if err != nil || got.PolicyCTPodBudget() != c.want {
			t.Errorf("%v: budget %d (%v), want %d", c.values, got.PolicyCTPodBudget(), err, c.want)
		}
	}
	for _, v := range []string{"-1", "many", "4194305"} {
		_, err := Resolve(Source{Name: "nc", Values: map[string]string{"policy-ct-pod-max": v}})
		want := `key "policy-ct-pod-max" value "` + v + `": must be "auto"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("policy-ct-pod-max %q: %v, want %s", v, err, want)
		}
	}
}

// nat-pod-max and lb-ct-pod-max: auto is a quarter of the table's flows, 0 is no
// budget.
func TestNATPodMaxKey(t *testing.T) {
	for v, want := range map[string]int{"auto": 8192, "0": 0, "100": 100} {
		got, err := Resolve(Source{Name: "nc", Values: map[string]string{"nat-pod-max": v, "lb-ct-pod-max": v}})
		if err != nil || got.NATPodBudget() != want {
			t.Errorf("nat-pod-max %q: budget %d (%v), want %d", v, got.NATPodBudget(), err, want)
		}
		if want == 8192 {
			want = 32768
		}
		if got.LBCTPodBudget() != want {
			t.Errorf("lb-ct-pod-max %q: budget %d, want %d", v, got.LBCTPodBudget(), want)
		}
	}
	_, err := Resolve(Source{Name: "nc", Values: map[string]string{"nat-pod-max": "-5"}})
	if want := `key "nat-pod-max" value "-5": must be "auto" (8192, a quarter of the masquerade table), 0 (no budget) or a number of flows`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("nat-pod-max -5: %v, want %s", err, want)
	}
}

// hubble-tls-client-names is a comma-separated list; empty is none (any client the CAs
// signed).
func TestHubbleTLSClientNamesKey(t *testing.T) {
	c, err := Resolve(Source{Name: "test", Values: map[string]string{"hubble-tls-client-names": " relay.hubble.myelin.local, ,other.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.HubbleTLSClientNames, "|"); got != "relay.hubble.myelin.local|other.test" {
		t.Errorf("hubble-tls-client-names = %q", got)
	}
	if c, err = Resolve(); err != nil || c.HubbleTLSClientNames != nil {
		t.Errorf("default hubble-tls-client-names = %q, %v; want none", c.HubbleTLSClientNames, err)
	}
}
