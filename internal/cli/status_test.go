package cli

import (
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// The routing rows count nodes and routes in words that agree with the number.
func TestRoutingRows(t *testing.T) {
	for _, c := range []struct {
		in   api.RoutingInfo
		want string
	}{
		{api.RoutingInfo{Mode: "tunnel", Routes: 1, Tunnel: "BPF"}, "1 node over VXLAN, encapsulated by BPF"},
		{api.RoutingInfo{Mode: "tunnel", Routes: 0, Tunnel: "BPF"}, "0 nodes over VXLAN"},
		{api.RoutingInfo{Mode: "tunnel", Routes: 3, Tunnel: "myelin_vxlan"}, "3 nodes over VXLAN, encapsulated by myelin_vxlan"},
		{api.RoutingInfo{Mode: "native", AutoDirectNodeRoutes: true, Routes: 1}, "1 direct route (auto-direct-node-routes)"},
		{api.RoutingInfo{Mode: "native", AutoDirectNodeRoutes: true, Routes: 2}, "2 direct routes (auto-direct-node-routes)"},
	} {
		var b strings.Builder
		statusRows{&b}.routing(api.Status{Routing: c.in})
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("routing rows of %+v:\n%s\nwant a row with %q", c.in, b.String(), c.want)
		}
	}
}

// Status says whether this node's pod addresses are dropped when other hosts send
// them, or why not.
func TestStatusUplinkPodCheck(t *testing.T) {
	for _, c := range []struct {
		check api.SourceCheckInfo
		want  string
	}{
		{api.SourceCheckInfo{Enabled: true, UplinkPodCIDR: "10.244.1.0/24"}, "this node's PodCIDR 10.244.1.0/24 is dropped as spoofed"},
		{api.SourceCheckInfo{Enabled: true, UplinkOff: "non-masquerade-cidrs is set"}, "this node's pod addresses are not checked: non-masquerade-cidrs is set"},
		// pod-source-from-hosts: drop keeps the check with source validation off.
		{api.SourceCheckInfo{Warning: "pods can send from any address", UplinkPodCIDR: "10.244.1.0/24"}, "this node's PodCIDR 10.244.1.0/24 is dropped as spoofed"},
	} {
		var b strings.Builder
		statusRows{&b}.protection(api.Status{SourceCheck: c.check})
		if !strings.Contains(b.String(), "from other hosts:") || !strings.Contains(b.String(), c.want) {
			t.Errorf("myelin status printed\n%s\nwant a row %q", b.String(), c.want)
		}
	}
}

// The agent's word on other nodes' pods (tunnel mode) is a row of its own; without
// it (native routing) there is no such row.
func TestStatusOtherNodesPods(t *testing.T) {
	var b strings.Builder
	statusRows{&b}.protection(api.Status{SourceCheck: api.SourceCheckInfo{Enabled: true, OtherNodesPods: "only through the overlay"}})
	if !strings.Contains(b.String(), "other nodes' pods:") || !strings.Contains(b.String(), "only through the overlay") {
		t.Errorf("myelin status printed\n%s\nwant a row of other nodes' pods", b.String())
	}
	b.Reset()
	statusRows{&b}.protection(api.Status{SourceCheck: api.SourceCheckInfo{Enabled: true}})
	if strings.Contains(b.String(), "other nodes' pods") {
		t.Errorf("native routing: myelin status printed\n%s\nwant no row of other nodes' pods", b.String())
	}
}
