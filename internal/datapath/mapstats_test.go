package datapath

import (
	"net/netip"
	"testing"
)

// MapStats counts hash, LPM and LRU maps alike (raw keys and values), and an
// attachment to a missing device counts as an attach error.
func TestPrivilegedMapStats(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := d.UpsertEndpoint(netip.MustParseAddr("10.1.0.20"), podB); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertTunnel(netip.MustParsePrefix("10.244.2.0/24"), netip.MustParseAddr("198.18.0.12")); err != nil {
		t.Fatal(err)
	}
	got := map[string]MapStat{}
	for _, s := range d.MapStats() {
		got[s.Name] = s
		if s.Err != nil {
			t.Errorf("map stat %s: %v", s.Name, s.Err)
		}
		if s.Max <= 0 || s.Entries > s.Max || s.Kind == "" {
			t.Errorf("map stat %+v: want a kind and 0 <= entries <= max > 0", s)
		}
	}
	if s := got["myelin_endpoints"]; s.Entries != 1 || s.Kind != MapKindEndpoints {
		t.Errorf("myelin_endpoints = %+v, want 1 entry of kind endpoints", s)
	}
	if s := got["myelin_tunnel"]; s.Entries != 1 || s.Kind != MapKindRouting {
		t.Errorf("myelin_tunnel (LPM) = %+v, want 1 entry of kind routing", s)
	}
	if s, ok := got["myelin_policy_ct"]; !ok || s.Kind != MapKindConntrack {
		t.Errorf("myelin_policy_ct (LRU) = %+v, %v: want it counted as conntrack", s, ok)
	}
	if d.AttachErrors() != 0 {
		t.Fatalf("attach errors before any attach: %d", d.AttachErrors())
	}
	if err := d.AttachEndpoint(1<<30, "myl-missing"); err == nil {
		t.Fatal("attach to a missing ifindex succeeded")
	}
	if d.AttachErrors() != 1 {
		t.Errorf("attach errors after one failed attach: %d, want 1", d.AttachErrors())
	}
}
