package datapath

import (
	"net/netip"
	"slices"
	"testing"
)

// One tracked entry per connection, shared by both ends on one node: with
// A and B both isolated, A's SYN to B is judged at A's egress and at B's
// ingress (BPF delivery), its established segments pass both ends on the
// entry (the ingress check takes what the egress lookup found), and when
// only B's end is forgotten (its policy tightened), A's next segment still
// leaves A but is judged, and denied, at B's ingress.
func TestPrivilegedBPFPolicySharedTracking(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	fromPod := d.objs.MyelinFromPod
	both := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress | PolicyIngress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idB): {tcpPort(8080)}, ingressOf(podBIP, idA): {tcpPort(8080)}}}
	syn := ipv4(protoTCP, podA, podBIP).withSrc(podA, 6001).withDst(podBIP, 8080)
	ack := syn.withTCPFlags(0x10)
	fwd := func(name string, p pkt) policyStep {
		return policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{name: name, in: p.build(),
			ctx: ctxPodA, verdict: tcActRedirect, out: delivered(p), reason: "FORWARDED"}}}
	}
	tightenB := func(d *Datapath) error {
		if err := d.DeletePolicy(ingressOf(podBIP, idA)); err != nil {
			return err
		}
		_, err := d.PurgePolicyCT(PolicyCTPurge{Endpoints: map[netip.Addr]bool{mustAddr(podBIP): true}})
		return err
	}
	first := fwd("SYN A→B:8080: judged at both ends, delivered", syn)
	first.seed = both
	denied := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "to-pod", progCase: progCase{
		name: "B's end forgotten and B tightened: A's segment is denied at B's ingress", in: ack.build(), ctx: ctxPodA,
		verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}, change: tightenB}
	runPolicySteps(t, d, []policyStep{first, fwd("established segment: tracked at both ends", ack), denied})

	entries := policyCTEntries(d)
	for k, v := range entries {
		if want := policyCTEndLo | policyCTOpenedLo | policyCTOutLo; u32Addr(k.AddrLo) != mustAddr(podA) || v.Ends != want { // podA < podB
			t.Errorf("tracked entry %+v ends %#x after B's end was forgotten, want A's end (lo) from its egress check, A the opener, %#x", k, v.Ends, want)
		}
	}
	if len(entries) != 1 {
		t.Errorf("%d tracked entries for one connection, want 1", len(entries))
	}
}

// The isolation flags live in myelin_policy_eps and in the endpoint's own
// entry (which the datapath reads first): an endpoint written after its
// flags gets them, a flags change reaches an existing endpoint, and
// clearing them clears both.
func TestPrivilegedPolicyFlagsMirror(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	ip := mustAddr("10.1.0.77")
	endpointFlags := func() uint32 {
		var v myelinEndpointInfo
		if err := d.objs.MyelinEndpoints.Lookup(ip.As4(), &v); err != nil {
			t.Fatalf("read endpoint %s: %v", ip, err)
		}
		return v.Flags
	}
	if err := d.SetPolicyFlags(ip, PolicyIngress); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertEndpoint(ip, podB); err != nil {
		t.Fatal(err)
	}
	if got := endpointFlags(); got != uint32(PolicyIngress) {
		t.Errorf("endpoint written after its flags: flags %#x, want %#x", got, PolicyIngress)
	}
	if err := d.SetPolicyFlags(ip, PolicyIngress|PolicyEgress); err != nil {
		t.Fatal(err)
	}
	if got := endpointFlags(); got != uint32(PolicyIngress|PolicyEgress) {
		t.Errorf("flags changed on an existing endpoint: %#x, want %#x", got, PolicyIngress|PolicyEgress)
	}
	if err := d.SetPolicyFlags(ip, 0); err != nil {
		t.Fatal(err)
	}
	all, err := d.PolicyFlagsAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := endpointFlags(); got != 0 || all[ip] != 0 {
		t.Errorf("flags cleared: endpoint %#x, myelin_policy_eps %#x, want both 0", got, all[ip])
	}
}

// A purge forgets only the ends it names: the end of a purged endpoint, the
// ends whose peer is a purged address or lies in a purged prefix. Allowed
// keeps an end when the connection may be opened in the direction the end's
// check accepted it: by the end to the peer's port when its bit came from its
// egress check (OUT), by the peer to the end's port when from its ingress
// check (IN); never an end with neither (older programs), nor one named for a
// /32 (an address that may be another pod's now).
func TestPolicyCTMatchesEnds(t *testing.T) {
	a, b := mustAddr("10.1.0.10"), mustAddr("10.1.0.20")
	k := myelinPolicyCtKey{AddrLo: addrU32(a.As4()), AddrHi: addrU32(b.As4()), PortLo: htons(40001), PortHi: htons(8080), Proto: protoTCP}
	both := policyCTEndLo | policyCTEndHi
	var asked []PolicyCTEnd
	yes := func(e PolicyCTEnd) bool { asked = append(asked, e); return true }
	no := func(e PolicyCTEnd) bool { asked = append(asked, e); return false }
	onlyOut := func(e PolicyCTEnd) bool { asked = append(asked, e); return e.Egress }
	onlyIn := func(e PolicyCTEnd) bool { asked = append(asked, e); return !e.Egress }
	bIn := PolicyCTEnd{Local: b, Peer: a, LocalPort: 8080, PeerPort: 40001, Proto: protoTCP}
	bOut := PolicyCTEnd{Local: b, Peer: a, LocalPort: 8080, PeerPort: 40001, Proto: protoTCP, Egress: true}
	aIn := PolicyCTEnd{Local: a, Peer: b, LocalPort: 40001, PeerPort: 8080, Proto: protoTCP}
	aOut := PolicyCTEnd{Local: a, Peer: b, LocalPort: 40001, PeerPort: 8080, Proto: protoTCP, Egress: true}
	for _, c := range []struct {
		name  string
		ends  uint32
		p     PolicyCTPurge
		want  uint32
		asked []PolicyCTEnd
	}{
		{"endpoint b: b's end only", both, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}}, policyCTEndHi, nil},
		{"endpoint a: a's end only", both, PolicyCTPurge{Endpoints: map[netip.Addr]bool{a: true}}, policyCTEndLo, nil},
		{"endpoint b, only a's end noted: nothing", policyCTEndLo, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}}, 0, nil},
		{"peer b gone: both ends", both, PolicyCTPurge{Peers: map[netip.Addr]bool{b: true}}, both, nil},
		{"prefix holding a: b's end (a is its peer)", both, PolicyCTPurge{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/28")}}, policyCTEndHi, nil},
		{"unrelated endpoint: nothing", both, PolicyCTPurge{Endpoints: map[netip.Addr]bool{mustAddr("10.1.0.30"): true}}, 0, nil},
		{"endpoint b, a may open it to b: kept", both | policyCTInHi, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: yes}, 0, []PolicyCTEnd{bIn}},
		{"endpoint b, a may not, b's bit from its ingress: forgotten, b's opening not asked", both | policyCTOutLo | policyCTInHi, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: onlyOut}, policyCTEndHi, []PolicyCTEnd{bIn}},
		{"endpoint b, b's bit from its egress, b may open it: kept", both | policyCTOutHi, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: onlyOut}, 0, []PolicyCTEnd{bOut}},
		{"endpoint b, b's bit from its egress, only a may open it: forgotten, a's opening not asked", both | policyCTOutHi, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: onlyIn}, policyCTEndHi, []PolicyCTEnd{bOut}},
		{"endpoint a, a's bit from its egress, a may open it: kept", both | policyCTOutLo, PolicyCTPurge{Endpoints: map[netip.Addr]bool{a: true}, Allowed: onlyOut}, 0, []PolicyCTEnd{aOut}},
		{"endpoint a, a's bit from its ingress, b may open it: kept", both | policyCTInLo, PolicyCTPurge{Endpoints: map[netip.Addr]bool{a: true}, Allowed: onlyIn}, 0, []PolicyCTEnd{aIn}},
		{"endpoint a, a's bit from its egress, nothing allowed: forgotten", both | policyCTOutLo, PolicyCTPurge{Endpoints: map[netip.Addr]bool{a: true}, Allowed: no}, policyCTEndLo, []PolicyCTEnd{aOut}},
		{"prefix holding a, a may open it to b: b's end kept", both | policyCTInHi, PolicyCTPurge{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/28")}, Allowed: yes}, 0, []PolicyCTEnd{bIn}},
		{"neither IN nor OUT (older programs): not asked, forgotten", both, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: yes}, policyCTEndHi, nil},
		{"endpoint b let in by the host's exemption: kept, not asked", policyCTEndHi | policyCTInHi | policyCTHostPeer, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: no}, 0, nil},
		{"the same without a judge: forgotten", policyCTEndHi | policyCTInHi | policyCTHostPeer, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}}, policyCTEndHi, nil},
		{"host peer, b's bit from its egress: asked", policyCTEndHi | policyCTOutHi | policyCTHostPeer, PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true}, Allowed: no}, policyCTEndHi, []PolicyCTEnd{bOut}},
		{"peer b's /32 changed: not asked, forgotten", both | policyCTOutLo, PolicyCTPurge{Peers: map[netip.Addr]bool{b: true}, Endpoints: map[netip.Addr]bool{a: true}, Allowed: yes}, both, nil},
		{"gone: opener and all, not asked", both | policyCTOpenedLo | policyCTOutLo, PolicyCTPurge{Peers: map[netip.Addr]bool{b: true}, Gone: map[netip.Addr]bool{b: true}, Allowed: yes}, both | policyCTOpened, nil},
	} {
		asked = nil
		if got := policyCTForget(k, c.ends, c.p); got != c.want {
			t.Errorf("%s: forgets %#x, want %#x", c.name, got, c.want)
		}
		if !slices.Equal(asked, c.asked) {
			t.Errorf("%s: asked %+v, want %+v", c.name, asked, c.asked)
		}
	}
}

// An upgrade that replaced myelin_policy_eps empty (a layout it could not convert)
// while the endpoints map kept its entries must not open the isolated pods: Load
// writes their flags back, so the agent's restore (UpsertEndpoint, which takes the
// flags from myelin_policy_eps) keeps them isolated.
func TestPrivilegedLoadRestoresPolicyFlags(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	cfg := Config{PinDir: dir, HostRouting: HostRoutingBPF, NodeIP: testNodeIP}
	isolated, open := mustAddr("10.1.0.77"), mustAddr("10.1.0.78")
	d, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{isolated, open} {
		if err := d.UpsertEndpoint(ip, podB); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SetPolicyFlags(isolated, PolicyIngress|PolicyEgress); err != nil {
		t.Fatal(err)
	}
	// What a replaced, empty myelin_policy_eps holds.
	if err := d.objs.MyelinPolicyEps.Delete(isolated.As4()); err != nil {
		t.Fatal(err)
	}
	d.Close()

	d, err = Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	all, err := d.PolicyFlagsAll()
	if err != nil {
		t.Fatal(err)
	}
	if all[isolated] != PolicyIngress|PolicyEgress || all[open] != 0 {
		t.Errorf("myelin_policy_eps after Load: %v, want %v isolated both ways and %v absent", all, isolated, open)
	}
	if err := d.UpsertEndpoint(isolated, podB); err != nil { // the agent's restore
		t.Fatal(err)
	}
	var v myelinEndpointInfo
	if err := d.objs.MyelinEndpoints.Lookup(isolated.As4(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Flags != uint32(PolicyIngress|PolicyEgress) {
		t.Errorf("endpoint flags after restore: %#x, want %#x", v.Flags, PolicyIngress|PolicyEgress)
	}
}
