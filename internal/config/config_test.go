package config

import (
	"strings"
	"testing"
)

func TestResolveDefaults(t *testing.T) {
	c, err := Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.RoutingMode != RoutingTunnel || c.HostRouting != HostRoutingAuto || !c.EnableBPFMasquerade ||
		c.TunnelPort != 8472 || c.MaglevTableSize != 16381 || c.UserIPTablesGuard != GuardRefuse {
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
		{map[string]string{"mtu": "500"}, `must be 0 (detect from the uplink) or between 1280 and 65535`},
		{map[string]string{"non-masquerade-cidrs": "10.0.0.0/8,bad"}, `"bad": must be an IPv4 CIDR`},
		{map[string]string{"ipv4-native-routing-cidr": "192.168.0.0/16"}, `does not contain the cluster CIDR`},
	}
	for _, tt := range tests {
		_, err := Resolve(Source{Name: "src", Values: tt.values})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%v) = %v, want error containing %q", tt.values, err, tt.want)
		}
	}
}
