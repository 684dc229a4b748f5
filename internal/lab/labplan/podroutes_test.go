package labplan

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestPodCIDRRoutes(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	for _, tc := range []struct {
		name            string
		underlay        Underlay
		cidrs           map[string]netip.Prefix
		wantCP, wantRtr []Route
	}{
		{"l2: all direct", UnderlayL2,
			map[string]netip.Prefix{"myelin-node-1": pfx("10.244.1.0/24"), "myelin-node-2": pfx("10.244.0.0/24")},
			[]Route{{pfx("10.244.0.0/24"), addr("198.18.0.12")}, {pfx("10.244.1.0/24"), addr("198.18.0.11")}}, nil},
		{"l3: segment B through the router", UnderlayL3,
			map[string]netip.Prefix{"myelin-node-1": pfx("10.244.1.0/24"), "myelin-node-2": pfx("10.244.0.0/24")},
			[]Route{{pfx("10.244.1.0/24"), addr("198.18.0.11")}}, []Route{{pfx("10.244.0.0/24"), addr("198.18.1.12")}}},
		{"no PodCIDR yet, unknown node", UnderlayL2,
			map[string]netip.Prefix{"myelin-node-1": {}, "other": pfx("10.244.9.0/24")}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Underlay = tc.underlay
			p, err := NewPlan(o, DefaultAddressing())
			if err != nil {
				t.Fatal(err)
			}
			cp, rtr := p.PodCIDRRoutes(tc.cidrs)
			if !reflect.DeepEqual(cp, tc.wantCP) || !reflect.DeepEqual(rtr, tc.wantRtr) {
				t.Errorf("PodCIDRRoutes = %v, %v; want %v, %v", cp, rtr, tc.wantCP, tc.wantRtr)
			}
		})
	}
}
