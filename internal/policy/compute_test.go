package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Fixture: namespaces x and y; pods x/a (local, serves "http" on 80),
// x/b (local), y/a (remote), y/c (remote, "http" on 8080).
var (
	nsLabels = map[string]map[string]string{"x": {"ns": "x"}, "y": {"ns": "y"}}
	xa       = Pod{Namespace: "x", Name: "a", Labels: map[string]string{"pod": "a"}, IP: ip("10.244.0.10"), Node: "n1",
		Ports: []NamedPort{{Name: "http", Proto: ProtoTCP, Port: 80}}}
	xb = Pod{Namespace: "x", Name: "b", Labels: map[string]string{"pod": "b"}, IP: ip("10.244.0.11"), Node: "n1"}
	ya = Pod{Namespace: "y", Name: "a", Labels: map[string]string{"pod": "a"}, IP: ip("10.244.1.10"), Node: "n2"}
	yc = Pod{Namespace: "y", Name: "c", Labels: map[string]string{"pod": "c"}, IP: ip("10.244.1.12"), Node: "n2",
		Ports: []NamedPort{{Name: "http", Proto: ProtoTCP, Port: 8080}}}
	allPods = []Pod{xa, xb, ya, yc}
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func netpol(name string, podSel *metav1.LabelSelector, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	spec.PodSelector = *podSel
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name}, Spec: spec}
}

func tcp(port int) networkingv1.NetworkPolicyPort {
	p := corev1.ProtocolTCP
	v := intstr.FromInt32(int32(port))
	return networkingv1.NetworkPolicyPort{Protocol: &p, Port: &v}
}

func named(name string) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Port: &v}
}

func compute(t *testing.T, nps ...*networkingv1.NetworkPolicy) (State, *Endpoint) {
	t.Helper()
	st := Compute(Input{Node: "n1", Pods: allPods, Namespaces: nsLabels, Policies: nps}, NewIdentities())
	ep := st.Endpoints[xa.IP]
	if ep == nil {
		t.Fatalf("no endpoint state for x/a; endpoints %v", st.Endpoints)
	}
	if len(st.Endpoints) != 2 {
		t.Errorf("endpoints %d, want the 2 local pods", len(st.Endpoints))
	}
	return st, ep
}

// idOf is the identity the state gives the pod's address.
func idOf(st State, p Pod) uint32 { return st.IPCache[netip.PrefixFrom(p.IP, 32)] }

func ingress(id uint32) Key { return Key{Identity: id} }
func egress(id uint32) Key  { return Key{Identity: id, Egress: true} }

var tcp80 = []datapath.PolicyPort{{Proto: ProtoTCP, Lo: 80, Hi: 80}}

func TestComputeDefaultDeny(t *testing.T) {
	_, ep := compute(t, netpol("deny", sel(), networkingv1.NetworkPolicySpec{}))
	if ep.Flags != datapath.PolicyIngress || len(ep.Entries) != 0 {
		t.Errorf("flags %b entries %v, want ingress isolated with no allows", ep.Flags, ep.Entries)
	}
	st, _ := compute(t)
	if len(st.Endpoints[xa.IP].Entries) != 0 || st.Endpoints[xa.IP].Flags != 0 {
		t.Error("no policy: want not isolated")
	}
}

func TestComputeSelectors(t *testing.T) {
	from := func(peers ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return netpol("p", sel("pod", "a"), networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})
	}
	cases := []struct {
		name  string
		peers []networkingv1.NetworkPolicyPeer
		want  []Pod
		cidrs []string // policy CIDRs whose own identity (non-pod addresses) is allowed too
	}{
		{"podSelector: own namespace only", []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}, []Pod{xb}, nil},
		{"namespaceSelector: every pod there", []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}}, []Pod{ya, yc}, nil},
		{"both in one peer: AND", []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "c")}}, []Pod{yc}, nil},
		{"two peers: OR", []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}, {PodSelector: sel("pod", "b")}}, []Pod{xb, ya, yc}, nil},
		{"empty podSelector: own namespace", []networkingv1.NetworkPolicyPeer{{PodSelector: sel()}}, []Pod{xa, xb}, nil},
		{"ipBlock with except matches pods", []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
			CIDR: "10.244.1.0/24", Except: []string{"10.244.1.12/32"}}}}, []Pod{ya}, []string{"10.244.1.0/24"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, ep := compute(t, from(c.peers...))
			want := map[Key][]datapath.PolicyPort{}
			for _, p := range c.want {
				want[ingress(idOf(st, p))] = tcp80
			}
			for _, c := range c.cidrs {
				want[ingress(st.IPCache[netip.MustParsePrefix(c)])] = tcp80
			}
			if !reflect.DeepEqual(ep.Entries, want) {
				t.Errorf("entries %v, want %v (ipcache %v)", ep.Entries, want, st.IPCache)
			}
		})
	}
}

// An ipBlock's identity covers addresses outside the cluster too; its except does not.
func TestComputeIPBlockAddresses(t *testing.T) {
	np := netpol("cidr", sel("pod", "a"), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
			CIDR: "203.0.113.0/24", Except: []string{"203.0.113.128/25"}}}}}}})
	st, ep := compute(t, np)
	cidr, except := st.IPCache[netip.MustParsePrefix("203.0.113.0/24")], st.IPCache[netip.MustParsePrefix("203.0.113.128/25")]
	if cidr == 0 || except == 0 || cidr == except {
		t.Fatalf("ipcache %v: want distinct identities for the CIDR and its except", st.IPCache)
	}
	want := map[Key][]datapath.PolicyPort{egress(cidr): {{}}}
	if !reflect.DeepEqual(ep.Entries, want) || ep.Flags != datapath.PolicyEgress {
		t.Errorf("flags %b entries %v, want egress isolated, %v", ep.Flags, ep.Entries, want)
	}
}

func TestComputeNamedPortsAndRanges(t *testing.T) {
	udp := corev1.ProtocolUDP
	end := int32(9100)
	lo := intstr.FromInt32(9000)
	np := netpol("ports", sel("pod", "a"), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
			named("http"), {Protocol: &udp, Port: &lo, EndPort: &end}, tcp(81), tcp(82)}}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y")}},
			Ports: []networkingv1.NetworkPolicyPort{named("http")}}},
	})
	st, ep := compute(t, np)
	want := map[Key][]datapath.PolicyPort{
		// x/a's own "http" is 80; 80-82 merge into one range.
		ingress(datapath.IdentityAny): {{Proto: ProtoTCP, Lo: 80, Hi: 82}, {Proto: ProtoUDP, Lo: 9000, Hi: 9100}},
		// Egress "http" is the peer's: y/c has it on 8080, y/a has none.
		egress(idOf(st, yc)): {{Proto: ProtoTCP, Lo: 8080, Hi: 8080}},
	}
	if !reflect.DeepEqual(ep.Entries, want) {
		t.Errorf("entries %v, want %v", ep.Entries, want)
	}
}

// An egress rule of named ports without peers resolves them on every identity that has
// a port of the name (x/a "http" 80, y/c "http" 8080), of one protocol only (a UDP
// "http" resolves on none), and on none without it; with many such rules, each is
// resolved only where the name exists (rulePeers.named).
func TestComputeNamedPortsWithoutPeers(t *testing.T) {
	udp := corev1.ProtocolUDP
	udpHTTP := named("http")
	udpHTTP.Protocol = &udp
	rules := []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{named("http")}},
		{Ports: []networkingv1.NetworkPolicyPort{udpHTTP}}}
	for i := range 200 {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{named(fmt.Sprintf("none-%d", i))}})
	}
	np := netpol("named", sel("pod", "a"), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: rules})
	st, ep := compute(t, np)
	want := map[Key][]datapath.PolicyPort{
		egress(idOf(st, xa)): {{Proto: ProtoTCP, Lo: 80, Hi: 80}},
		egress(idOf(st, yc)): {{Proto: ProtoTCP, Lo: 8080, Hi: 8080}},
	}
	if !reflect.DeepEqual(ep.Entries, want) {
		t.Errorf("entries %v, want %v", ep.Entries, want)
	}
}

func TestComputePoliciesAddUp(t *testing.T) {
	a := netpol("a", sel("pod", "a"), networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})
	b := netpol("b", sel(), networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(81)}}}})
	st, ep := compute(t, a, b)
	want := map[Key][]datapath.PolicyPort{ingress(idOf(st, xb)): {{Proto: ProtoTCP, Lo: 80, Hi: 81}}}
	if !reflect.DeepEqual(ep.Entries, want) || !reflect.DeepEqual(ep.IngressPolicies, []string{"x/a", "x/b"}) {
		t.Errorf("entries %v by %v, want %v by x/a and x/b", ep.Entries, ep.IngressPolicies, want)
	}
}

func TestComputeTooManyPortsFailsClosed(t *testing.T) {
	var ports []networkingv1.NetworkPolicyPort
	for p := 1000; p < 1000+2*(datapath.PolicyPortsMax+1); p += 2 {
		ports = append(ports, tcp(p))
	}
	_, ep := compute(t, netpol("many", sel("pod", "a"), networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ports}}}))
	if ep.Flags != datapath.PolicyIngress|datapath.PolicyIngressIncomplete || len(ep.Entries) != 0 || len(ep.Problems) != 1 {
		t.Errorf("flags %b entries %v problems %v: want isolated, incomplete, no entry, one problem", ep.Flags, ep.Entries, ep.Problems)
	}
}

func TestComputeBadInputIsAProblem(t *testing.T) {
	icmp := corev1.Protocol("ICMP")
	st, ep := compute(t,
		netpol("proto", sel("pod", "a"), networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &icmp}}}}}),
		netpol("cidr", sel("pod", "b"), networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "300.0.0.0/8"}}}}}}))
	if ep.Flags&datapath.PolicyIngressIncomplete == 0 || len(ep.Entries) != 0 {
		t.Errorf("x/a: flags %b entries %v: want fail closed", ep.Flags, ep.Entries)
	}
	if len(st.Problems) != 2 {
		t.Errorf("problems %v, want one per bad policy", st.Problems)
	}
}

// The same cluster computes the same numbers, also after a save and load.
func TestIdentitiesStable(t *testing.T) {
	in := Input{Node: "n1", Pods: allPods, Namespaces: nsLabels}
	ids := NewIdentities()
	first := Compute(in, ids)
	path := filepath.Join(t.TempDir(), "ids.json")
	if err := ids.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadIdentities(path)
	if err != nil {
		t.Fatal(err)
	}
	again := Compute(in, loaded)
	if !reflect.DeepEqual(first.IPCache, again.IPCache) {
		t.Errorf("ipcache changed after a restart:\n%v\n%v", first.IPCache, again.IPCache)
	}
	// An unchanged allocator is not written again; a changed one is.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := loaded.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unchanged identities saved again (stat: %v)", err)
	}
	Compute(Input{Node: "n1", Pods: allPods[:1], Namespaces: nsLabels}, loaded) // releases the others
	if err := loaded.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("changed identities not saved: %v", err)
	}
	if idOf(first, xa) == idOf(first, xb) || idOf(first, xa) == idOf(first, ya) {
		t.Errorf("different label sets share an identity: %v", first.IPCache)
	}
}

func TestTrace(t *testing.T) {
	np := netpol("web", sel("pod", "a"), networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}, Ports: []networkingv1.NetworkPolicyPort{named("http")}}}})
	in := Input{Pods: allPods, Namespaces: nsLabels, Policies: []*networkingv1.NetworkPolicy{np}}
	r := Trace(in, xb, xa, ProtoTCP, 80)
	if !r.Allowed() || !reflect.DeepEqual(r.Ingress.By, []string{"x/web"}) || r.Egress.Isolated {
		t.Errorf("x/b -> x/a:80 = %+v, want allowed by x/web", r)
	}
	if r := Trace(in, xb, xa, ProtoTCP, 81); r.Allowed() || !reflect.DeepEqual(r.Ingress.Isolating, []string{"x/web"}) {
		t.Errorf("x/b -> x/a:81 = %+v, want denied, isolated by x/web", r)
	}
	if r := Trace(in, ya, xa, ProtoTCP, 80); r.Allowed() {
		t.Errorf("y/a -> x/a:80 = %+v, want denied", r)
	}
}

// Identity keys are saved with their numbers (policy-identities.json): a restarted
// or upgraded agent must render the same key for the same peer, or every identity
// gets a new number. A map rendered once renders the same from the keyer's memo.
func TestIdentityKeyFormat(t *testing.T) {
	shared := map[string]string{"tier": "web", "app": "shop"}
	p := peer{pod: true, namespace: "x", labels: shared, nsLabels: map[string]string{"ns": "x"},
		ports: []NamedPort{{Name: "http", Proto: ProtoTCP, Port: 80}, {Name: "dns", Proto: ProtoUDP, Port: 53}},
		atoms: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	k := newKeyer()
	want := "pod|x|app=shop,tier=web,|ns=x,|dns/17/53,http/6/80|10.0.0.0/8"
	for range 2 {
		if got := k.key(p); got != want {
			t.Errorf("key = %q, want %q", got, want)
		}
	}
	other := p
	other.labels = map[string]string{"app": "shop"}
	if got := k.key(other); got != "pod|x|app=shop,|ns=x,|dns/17/53,http/6/80|10.0.0.0/8" {
		t.Errorf("another label map rendered as %q", got)
	}
	same := p // equal, not shared: the same key
	same.labels, same.nsLabels, same.ports = map[string]string{"app": "shop", "tier": "web"}, map[string]string{"ns": "x"}, slices.Clone(p.ports)
	if got := k.key(same); got != want {
		t.Errorf("an equal peer's key = %q, want %q", got, want)
	}
	noAtoms := p
	noAtoms.atoms = nil
	if got := k.key(noAtoms); got != "pod|x|app=shop,tier=web,|ns=x,|dns/17/53,http/6/80" {
		t.Errorf("key without atoms = %q", got)
	}
	if got := k.key(peer{atoms: p.atoms}); got != "cidr|10.0.0.0/8" {
		t.Errorf("cidr key = %q", got)
	}
}

// Each rule keeps its own peers although a computation matches them once for
// every pod a policy selects: two ingress rules and an egress rule of one policy
// admit different pods (one by matchExpressions) on different ports, and both
// local pods it selects get the same entries.
func TestComputeRulesKeepTheirPeers(t *testing.T) {
	in := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "pod", Operator: metav1.LabelSelectorOpIn, Values: []string{"c"}}}}
	st, ep := compute(t, netpol("rules", sel(), networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("ns", "y"), PodSelector: sel("pod", "a")}},
				Ports: []networkingv1.NetworkPolicyPort{tcp(80)}},
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(), PodSelector: in}},
				Ports: []networkingv1.NetworkPolicyPort{tcp(81)}},
		},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("pod", "b")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(82)}},
		},
	}))
	port := func(p uint16) []datapath.PolicyPort { return []datapath.PolicyPort{{Proto: ProtoTCP, Lo: p, Hi: p}} }
	want := map[Key][]datapath.PolicyPort{
		ingress(idOf(st, ya)): port(80),
		ingress(idOf(st, yc)): port(81),
		egress(idOf(st, xb)):  port(82),
	}
	if !reflect.DeepEqual(ep.Entries, want) {
		t.Errorf("x/a entries %v, want %v", ep.Entries, want)
	}
	if got := st.Endpoints[xb.IP].Entries; !reflect.DeepEqual(got, want) {
		t.Errorf("x/b entries %v, want %v (the same rules)", got, want)
	}
}
