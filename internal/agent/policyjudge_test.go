package agent

import (
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// The judge decides a tracked end as the datapath's check decides a new
// connection: at the pod's egress for one it opens, towards the peer's port,
// else at its ingress, to its own port; by the longest ipcache
// prefix holding the peer (world when none), the peer's identity entry then
// the any-peer entry; a direction the pod is not isolated in allows all.
func TestPolicyJudge(t *testing.T) {
	x := netip.MustParseAddr("10.244.0.10")    // local, isolated both ways
	open := netip.MustParseAddr("10.244.0.11") // local, ingress only
	y, z := netip.MustParseAddr("10.244.1.10"), netip.MustParseAddr("10.244.1.11")
	udp53 := []datapath.PolicyPort{{Proto: policy.ProtoUDP, Lo: 53, Hi: 53}}
	st := policy.State{
		IPCache: map[netip.Prefix]uint32{
			netip.PrefixFrom(y, 32): 301, netip.PrefixFrom(z, 32): 303,
			netip.MustParsePrefix("203.0.113.0/24"): 304, netip.MustParsePrefix("203.0.113.0/28"): 305,
		},
		Endpoints: map[netip.Addr]*policy.Endpoint{
			x: {IP: x, Flags: datapath.PolicyIngress | datapath.PolicyEgress, Entries: map[policy.Key][]datapath.PolicyPort{
				{Identity: 301}: {{Proto: policy.ProtoTCP, Lo: 80, Hi: 90}},
				{Identity: datapath.IdentityAny, Egress: true}: udp53,
				{Identity: 304, Egress: true}:                  {{}},
			}},
			open: {IP: open, Flags: datapath.PolicyIngress, Entries: map[policy.Key][]datapath.PolicyPort{}},
		},
	}
	j := newPolicyJudge(st, desiredEntries(st))
	in := func(peer netip.Addr, port uint16, proto uint8) datapath.PolicyCTEnd {
		return datapath.PolicyCTEnd{Local: x, Peer: peer, LocalPort: port, PeerPort: 40000, Proto: proto}
	}
	out := func(peer netip.Addr, port uint16, proto uint8) datapath.PolicyCTEnd {
		return datapath.PolicyCTEnd{Local: x, Peer: peer, LocalPort: 40000, PeerPort: port, Proto: proto, Egress: true}
	}
	for _, c := range []struct {
		name string
		e    datapath.PolicyCTEnd
		want bool
	}{
		{"y into x's port 80", in(y, 80, policy.ProtoTCP), true},
		{"y into x's port 90 (the range's end)", in(y, 90, policy.ProtoTCP), true},
		{"y into x's port 91", in(y, 91, policy.ProtoTCP), false},
		{"y into x's port 80 over UDP", in(y, 80, policy.ProtoUDP), false},
		{"z into x's port 80 (another identity)", in(z, 80, policy.ProtoTCP), false},
		{"x to z's port 53 over UDP (any peer)", out(z, 53, policy.ProtoUDP), true},
		{"x to z's port 53 over TCP", out(z, 53, policy.ProtoTCP), false},
		{"x to an address of the /24, any port", out(netip.MustParseAddr("203.0.113.100"), 8443, policy.ProtoTCP), true},
		{"x to an address of the longer /28 (another identity)", out(netip.MustParseAddr("203.0.113.5"), 8443, policy.ProtoTCP), false},
		{"x to the world, UDP 53 (any peer)", out(netip.MustParseAddr("198.51.100.1"), 53, policy.ProtoUDP), true},
		{"x to the world, TCP 443", out(netip.MustParseAddr("198.51.100.1"), 443, policy.ProtoTCP), false},
		{"an ingress-only pod's own connection out", datapath.PolicyCTEnd{Local: open, Peer: z, LocalPort: 40000, PeerPort: 443, Proto: policy.ProtoTCP, Egress: true}, true},
		{"into an ingress-only pod with no entries", datapath.PolicyCTEnd{Local: open, Peer: y, LocalPort: 80, PeerPort: 40000, Proto: policy.ProtoTCP}, false},
		{"a pod not isolated", datapath.PolicyCTEnd{Local: netip.MustParseAddr("10.244.0.12"), Peer: z, LocalPort: 80, Proto: policy.ProtoTCP}, true},
	} {
		if got := j.allows(c.e); got != c.want {
			t.Errorf("%s: allows %v, want %v", c.name, got, c.want)
		}
	}
}

// An apply whose writes all went in lets the purge judge ends again by the new
// state (a widened port list keeps the connections it still allows); one with a
// failed write forgets every end it names, as the maps may not hold the state.
func TestApplyPolicyPurgeJudgesAgain(t *testing.T) {
	m := newFakePolicyMaps()
	base := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, base, nil, nil); err != nil {
		t.Fatal(err)
	}
	m.purges = nil
	wider := serverState(map[netip.Addr]uint32{podX: 300, podY: 301},
		map[uint32][]datapath.PolicyPort{301: {{Proto: policy.ProtoTCP, Lo: 80, Hi: 80}, {Proto: policy.ProtoTCP, Lo: 443, Hi: 443}}})
	if _, err := applyPolicy(m, &purgeJournal{}, wider, nil, nil); err != nil || len(m.purges) != 1 || !m.purges[0].Endpoints[podX] {
		t.Fatalf("ports added to an entry: purges %v, err %v; want x's connections named", m.purges, err)
	}
	allowed := m.purges[0].Allowed
	if allowed == nil {
		t.Fatal("a clean apply's purge has no Allowed: every still-allowed connection of x would lose its end")
	}
	yTo := func(port uint16) datapath.PolicyCTEnd {
		return datapath.PolicyCTEnd{Local: podX, Peer: podY, LocalPort: port, PeerPort: 40000, Proto: policy.ProtoTCP}
	}
	if !allowed(yTo(80)) || !allowed(yTo(443)) || allowed(yTo(8080)) {
		t.Errorf("Allowed: y into x's 80 %v, 443 %v, 8080 %v; want true, true, false", allowed(yTo(80)), allowed(yTo(443)), allowed(yTo(8080)))
	}

	// A second isolated pod whose entry can't be written (more ranges than the
	// map holds): its ends are not kept, x's are still judged.
	m.purges = nil
	podW := netip.MustParseAddr("10.244.0.20")
	tooMany := make([]datapath.PolicyPort, datapath.PolicyPortsMax+1)
	for i := range tooMany {
		tooMany[i] = datapath.PolicyPort{Proto: policy.ProtoTCP, Lo: uint16(1000 + i), Hi: uint16(1000 + i)}
	}
	m.maxPorts = datapath.PolicyPortsMax
	withW := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	withW.Endpoints[podW] = &policy.Endpoint{Pod: "x/w", IP: podW, Flags: datapath.PolicyIngress,
		Entries: map[policy.Key][]datapath.PolicyPort{{Identity: 301}: tooMany}}
	if res, err := applyPolicy(m, &purgeJournal{}, withW, nil, nil); err != nil || res.failed[podW] == nil || len(m.purges) != 1 || m.purges[0].Allowed == nil {
		t.Fatalf("one pod's entry failed: purges %v, failed %v, err %v; want w failed, x's ends judged", m.purges, res.failed, err)
	}
	if allowed := m.purges[0].Allowed; !allowed(yTo(80)) ||
		allowed(datapath.PolicyCTEnd{Local: podW, Peer: podY, LocalPort: 1000, PeerPort: 40000, Proto: policy.ProtoTCP}) {
		t.Error("Allowed: want x's allowed end kept and none of w's (its entry is not in the map)")
	}
	m.maxPorts = 0

	// x admits y on xPorts; w, if wFlags, admits y on wPorts.
	state := func(xPorts []datapath.PolicyPort, wFlags datapath.PolicyFlags, wPorts []datapath.PolicyPort) policy.State {
		st := serverState(map[netip.Addr]uint32{podX: 300, podY: 301, podW: 304}, map[uint32][]datapath.PolicyPort{301: xPorts})
		if wFlags != 0 {
			st.Endpoints[podW] = &policy.Endpoint{Pod: "x/w", IP: podW, Flags: wFlags,
				Entries: map[policy.Key][]datapath.PolicyPort{{Identity: 301}: wPorts}}
		}
		return st
	}
	tcp8081 := []datapath.PolicyPort{{Proto: policy.ProtoTCP, Lo: 80, Hi: 81}}
	wEnd := datapath.PolicyCTEnd{Local: podW, Peer: podY, LocalPort: 80, PeerPort: 40000, Proto: policy.ProtoTCP}
	purgeOf := func(m *fakePolicyMaps, st policy.State) (datapath.PolicyCTPurge, policyApplied, error) {
		t.Helper()
		m.purges = nil
		res, err := applyPolicy(m, &purgeJournal{}, st, nil, nil)
		if len(m.purges) != 1 {
			t.Fatalf("purges %v, want one", m.purges)
		}
		return m.purges[0], res, err
	}

	// w's flags can't be written: its ends are not kept, x's still judged.
	m = newFakePolicyMaps()
	if _, err := applyPolicy(m, &purgeJournal{}, state(tcp80Only, datapath.PolicyIngress, tcp80Only), nil, nil); err != nil {
		t.Fatal(err)
	}
	m.failFlags = map[netip.Addr]bool{podW: true}
	p, res, _ := purgeOf(m, state(tcp8081, datapath.PolicyIngress|datapath.PolicyEgress, tcp8081))
	if !res.unflagged[podW] || p.Allowed == nil || !p.Allowed(yTo(80)) || p.Allowed(wEnd) {
		t.Errorf("w's flags failed: unflagged %v, Allowed set %v; want w unflagged, x's allowed end kept, none of w's",
			res.unflagged, p.Allowed != nil)
	}

	// Flags that can't be cleared (w no longer isolated): nothing is judged, as
	// the map may still isolate a pod the state does not.
	m = newFakePolicyMaps()
	if _, err := applyPolicy(m, &purgeJournal{}, state(tcp80Only, datapath.PolicyIngress, tcp80Only), nil, nil); err != nil {
		t.Fatal(err)
	}
	m.failFlags = map[netip.Addr]bool{podW: true}
	if p, _, err := purgeOf(m, state(tcp8081, 0, nil)); err == nil || p.Allowed != nil {
		t.Errorf("w's flags not cleared: err %v, Allowed set %v; want the error and no Allowed", err, p.Allowed != nil)
	}

	// A stale entry of a pod becoming isolated that can't be deleted: nothing is judged.
	m = newFakePolicyMaps()
	m.entries[datapath.PolicyKey{Endpoint: podW, Identity: 303}] = tcp80Only
	m.failDelete = true
	if p, _, err := purgeOf(m, state(tcp80Only, datapath.PolicyIngress, tcp80Only)); err == nil || p.Allowed != nil {
		t.Errorf("a stale entry not deleted: err %v, Allowed set %v; want the error and no Allowed", err, p.Allowed != nil)
	}

	m.purges = nil
	cidr := netip.MustParsePrefix("203.0.113.0/24")
	m.failCache = map[netip.Prefix]bool{cidr: true}
	failing := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	failing.IPCache[cidr] = 310
	if _, err := applyPolicy(m, &purgeJournal{}, failing, nil, nil); err == nil || len(m.purges) != 1 {
		t.Fatalf("narrowed with a failed ipcache write: purges %v, err %v; want one purge and the error", m.purges, err)
	}
	if m.purges[0].Allowed != nil {
		t.Error("an apply with a failed write judges ends again: the maps may not hold what the judge reads")
	}
}
