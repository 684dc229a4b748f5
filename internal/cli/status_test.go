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
