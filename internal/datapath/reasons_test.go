package datapath

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
)

func TestReasonName(t *testing.T) {
	for _, c := range []struct {
		code uint8
		want string
	}{
		{0, "FORWARDED"},
		{1, "PASS_STACK"},
		{2, "DROP_INVALID_PACKET"},
		{3, "DROP_NO_ROUTE"},
		{4, "DROP_REDIRECT_FAILED"},
		{5, "DROP_TUNNEL_KEY"},
		{6, "DROP_NAT_FULL"},
		{7, "DROP_NAT_NO_PORT"},
		{8, "DROP_SVC_NO_BACKEND"},
		{14, "DROP_POD_TUNNEL"},
		{21, "DROP_POLICY_DENIED"},
		{22, "DROP_POLICY_MAP_FULL"},
		{23, "DROP_POLICY_CT_BUDGET"},
		{24, "DROP_NAT_BUDGET"},
		{25, "DROP_SVC_CT_BUDGET"},
		{60, "PLAIN_POD_TO_NODE"},
		{61, "FLOWS_LIMITED"},
		{63, "EVENTS_LOST"},
		{42, "REASON_42"},
	} {
		if got := ReasonName(c.code); got != c.want {
			t.Errorf("ReasonName(%d) = %q, want %q", c.code, got, c.want)
		}
	}
}

func TestDirectionName(t *testing.T) {
	for _, c := range []struct {
		code uint8
		want string
	}{
		{0, "from-pod"},
		{1, "from-netdev"},
		{2, "to-netdev"},
		{3, "from-overlay"},
		{4, "to-pod"},
		{9, "dir-9"},
	} {
		if got := DirectionName(c.code); got != c.want {
			t.Errorf("DirectionName(%d) = %q, want %q", c.code, got, c.want)
		}
	}
}

// The Go names must cover every value of the C enums in the embedded
// object, named after them (REASON_ prefix dropped), so a reason added in
// C without a name here fails.
func TestNamesCoverCEnums(t *testing.T) {
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	var reasons, dirs *btf.Enum
	if err := spec.Types.TypeByName("reason", &reasons); err != nil {
		t.Fatal(err)
	}
	if err := spec.Types.TypeByName("direction", &dirs); err != nil {
		t.Fatal(err)
	}
	for _, v := range reasons.Values {
		if v.Name == "METRIC_REASONS" {
			continue
		}
		if got, want := ReasonName(uint8(v.Value)), strings.TrimPrefix(v.Name, "REASON_"); got != want {
			t.Errorf("C reason %s = %d is named %q, want %q", v.Name, v.Value, got, want)
		}
	}
	for _, v := range dirs.Values {
		if v.Name == "METRIC_DIRS" {
			continue
		}
		want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(v.Name, "DIR_")), "_", "-")
		if got := DirectionName(uint8(v.Value)); got != want {
			t.Errorf("C direction %s = %d is named %q, want %q", v.Name, v.Value, got, want)
		}
	}
}

func TestFeaturesMissing(t *testing.T) {
	all := Features{TCX: true, RedirectPeer: true, RedirectNeigh: true, FibLookup: true, RingBuf: true}
	if m := all.Missing(); len(m) != 0 {
		t.Errorf("Missing() with everything present = %q", m)
	}
	f := all
	f.RedirectPeer, f.TCX = false, false
	got := f.Missing()
	if len(got) != 2 || !strings.HasPrefix(got[0], "TCX links") ||
		!strings.HasPrefix(got[1], "bpf_redirect_peer helper") {
		t.Errorf("Missing() = %q, want TCX links and bpf_redirect_peer helper", got)
	}
	if n := len(Features{}.Missing()); n != 5 {
		t.Errorf("Missing() of an empty Features has %d entries, want 5", n)
	}
}

func TestDecodeEvent(t *testing.T) {
	// Addresses and ports are stored in network order and loaded as host integers.
	raw := myelinEvent{Type: 1, Reason: 3, Dir: 0, Proto: protoTCP, Ifindex: 5,
		Saddr: hostLoad([]byte{10, 1, 0, 10}), Daddr: hostLoad([]byte{10, 201, 0, 1}),
		Sport: uint16(hostLoad([]byte{0x9c, 0x40, 0, 0})), Dport: uint16(hostLoad([]byte{0x1f, 0x90, 0, 0})), Len: 73}
	want := Event{Type: "drop", Reason: "DROP_NO_ROUTE", Direction: "from-pod", IfIndex: 5,
		Src: netip.MustParseAddr("10.1.0.10"), Dst: netip.MustParseAddr("10.201.0.1"), Proto: protoTCP,
		SrcPort: 40000, DstPort: 8080, Len: 73}
	if got := decodeEvent(raw); got != want {
		t.Errorf("decodeEvent = %+v, want %+v", got, want)
	}
	if got := decodeEvent(myelinEvent{Type: 2}); got.Type != "trace" || got.Src.IsValid() {
		t.Errorf("decodeEvent of an empty trace = %+v, want trace without addresses", got)
	}
}

// hostLoad loads 4 bytes as the little-endian (amd64) CPU does.
func hostLoad(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func TestEndpointValue(t *testing.T) {
	good := EndpointInfo{IfIndex: 42, PodMAC: podBMAC, HostMAC: hostBMAC, ID: 7}
	v, err := endpointValue(good)
	if err != nil {
		t.Fatal(err)
	}
	if v.Ifindex != 42 || v.EndpointId != 7 || !slices.Equal(v.PodMac[:], podBMAC) || !slices.Equal(v.HostMac[:], hostBMAC) {
		t.Errorf("endpointValue = %+v", v)
	}
	for name, ep := range map[string]EndpointInfo{
		"zero ifindex":  {PodMAC: podBMAC, HostMAC: hostBMAC},
		"short pod MAC": {IfIndex: 1, PodMAC: podBMAC[:5], HostMAC: hostBMAC},
		"no host MAC":   {IfIndex: 1, PodMAC: podBMAC},
	} {
		if _, err := endpointValue(ep); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := endpointKey(netip.MustParseAddr("fd00::1")); err == nil {
		t.Error("endpointKey accepted IPv6")
	}
}
