package flow

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range s {
		p, err := ParseIP(v)
		if err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}

func TestFilterMatch(t *testing.T) {
	fl := &Flow{
		Time: time.Unix(100, 0), Node: "n1", Type: TypeDrop, Verdict: Dropped, Direction: Egress,
		Source:      Endpoint{IP: "10.244.1.5", Namespace: "x", Pod: "client-abc"},
		Destination: Endpoint{IP: "10.244.2.7", Namespace: "y", Pod: "web-1"},
		Protocol:    "TCP", SrcPort: 40000, DstPort: 80, Service: "y/web",
	}
	cases := []struct {
		name string
		f    Filter
		want bool
	}{
		{"empty matches all", Filter{}, true},
		{"source pod", Filter{SourcePod: []string{"x/client-abc"}}, true},
		{"source pod prefix", Filter{SourcePod: []string{"x/client"}}, true},
		{"source namespace", Filter{SourcePod: []string{"x/"}}, true},
		{"source pod other namespace", Filter{SourcePod: []string{"y/client"}}, false},
		{"source pod, the second value of its namespace", Filter{SourcePod: []string{"y/client", "x/other", "x/client", "z/"}}, true},
		{"source pod, no value of its namespace matches", Filter{SourcePod: []string{"x/other", "x/client-abcd", "y/client-abc"}}, false},
		{"pod without namespace is default", Filter{SourcePod: []string{"client"}}, false},
		{"destination pod OR", Filter{DestinationPod: []string{"z/", "y/web-1"}}, true},
		{"source CIDR", Filter{SourceIP: prefixes("10.244.1.0/24")}, true},
		{"source CIDR with host bits", Filter{SourceIP: prefixes("10.244.1.9/24")}, true},
		{"source IP", Filter{SourceIP: prefixes("10.244.1.5")}, true},
		{"source IP OR", Filter{SourceIP: prefixes("10.0.0.1", "10.244.1.5")}, true},
		{"destination IP miss", Filter{DestinationIP: prefixes("10.244.2.8")}, false},
		{"destination CIDR miss", Filter{DestinationIP: prefixes("10.244.3.0/24")}, false},
		{"IPv6 CIDR never holds an IPv4 address", Filter{SourceIP: prefixes("::/0")}, false},
		{"verdict any case", Filter{Verdict: []Verdict{"dropped"}}, true},
		{"verdict miss", Filter{Verdict: []Verdict{Forwarded}}, false},
		{"protocol lower", Filter{Protocol: []string{"tcp"}}, true},
		{"protocol number", Filter{Protocol: []string{"6"}}, true},
		{"protocol miss", Filter{Protocol: []string{"udp"}}, false},
		{"service", Filter{DestinationService: []string{"y/web"}}, true},
		{"service namespace", Filter{DestinationService: []string{"y/"}}, true},
		{"service miss", Filter{DestinationService: []string{"y/db"}}, false},
		{"source service never known", Filter{SourceService: []string{"x/client"}}, false},
		{"type", Filter{Type: []Type{TypeDrop}}, true},
		{"node miss", Filter{Node: []string{"n2"}}, false},
		{"either port", Filter{Port: []uint16{40000}}, true},
		{"port miss", Filter{Port: []uint16{443}}, false},
		{"direction", Filter{Direction: []Direction{Egress}}, true},
		{"fields AND", Filter{Verdict: []Verdict{Dropped}, Protocol: []string{"udp"}}, false},
	}
	for _, c := range cases {
		c2 := compile(c.f)
		if got := c2.match(fl, AddrsOf(fl)); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRequestMatch(t *testing.T) {
	fl := &Flow{Time: time.Unix(100, 0), Type: TypeL3L4, Verdict: Forwarded, Protocol: "UDP", Node: "n1"}
	lost := &Flow{Time: time.Unix(1, 0), Type: TypeLost, Lost: 3}
	cases := []struct {
		name string
		r    Request
		want bool
	}{
		{"empty", Request{}, true},
		{"whitelist OR", Request{Whitelist: []Filter{{Protocol: []string{"tcp"}}, {Node: []string{"n1"}}}}, true},
		{"whitelist miss", Request{Whitelist: []Filter{{Protocol: []string{"tcp"}}}}, false},
		{"blacklist", Request{Blacklist: []Filter{{Verdict: []Verdict{Forwarded}}}}, false},
		{"since", Request{Since: time.Unix(101, 0)}, false},
		{"until", Request{Until: time.Unix(99, 0)}, false},
		{"in range", Request{Since: time.Unix(100, 0), Until: time.Unix(100, 0)}, true},
	}
	for _, c := range cases {
		if got := c.r.Matcher().Match(fl); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
	if !(Request{Whitelist: []Filter{{Protocol: []string{"tcp"}}}, Since: time.Unix(50, 0)}).Matcher().Match(lost) {
		t.Error("a TypeLost record must always match")
	}
}

// IP filters are parsed once, where they come in: ParseIP for Go callers, the JSON
// form for GET /v1/flows; matching uses the parsed prefixes.
func TestParsedIPFilters(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"10.244.1.5", "10.244.1.5/32"},
		{"10.244.0.0/16", "10.244.0.0/16"},
		{"fd00::1", "fd00::1/128"},
		{"fd00::/64", "fd00::/64"},
	} {
		p, err := ParseIP(c.in)
		if err != nil || p.String() != c.want {
			t.Errorf("ParseIP(%q) = %v, %v; want %s", c.in, p, err, c.want)
		}
	}
	for _, bad := range []string{"", "pod-a", "10.0.0.0/33", "10.0.0.300", "fe80::1%eth0", strings.Repeat("1", 3<<20)} {
		if _, err := ParseIP(bad); err == nil {
			t.Errorf("ParseIP(%.20q): no error", bad)
		} else if len(err.Error()) > 200 {
			t.Errorf("ParseIP(%.20q): error of %d bytes: want the value cut short", bad, len(err.Error()))
		}
	}

	var r Request
	if err := json.Unmarshal([]byte(`{"Whitelist":[{"sourceIP":["10.244.1.0/24"],"destinationIP":["10.244.2.7"]}]}`), &r); err != nil {
		t.Fatal(err)
	}
	fl := &Flow{Type: TypeL3L4, Source: Endpoint{IP: "10.244.1.5"}, Destination: Endpoint{IP: "10.244.2.7"}}
	if !r.Matcher().Match(fl) {
		t.Errorf("%+v does not match %+v", r, fl)
	}
	fl.Destination.IP = "10.244.2.8"
	if r.Matcher().Match(fl) {
		t.Errorf("%+v matches %+v", r, fl)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Request
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("round trip through %s: %+v, %v; want %+v", b, back, err, r)
	}

	err = json.Unmarshal([]byte(`{"Blacklist":[{"destinationIP":["web-1"]}]}`), &r)
	if !errors.Is(err, ErrInvalidFilter) || !strings.Contains(err.Error(), `destinationIP "web-1"`) {
		t.Errorf("a malformed destinationIP: err %v, want ErrInvalidFilter naming the field and value", err)
	}
}

func TestRequestValidate(t *testing.T) {
	long := strings.Repeat("a", MaxFilterValueLen+1)
	many := make([]string, MaxFilterValues)
	for i := range many {
		many[i] = "x/"
	}
	cases := []struct {
		name string
		r    Request
		want string // in the error; "" for none
	}{
		{"empty", Request{}, ""},
		{"longest pod", Request{Whitelist: []Filter{{SourcePod: []string{strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253)}}}}, ""},
		{"oversized pod", Request{Whitelist: []Filter{{SourcePod: []string{long}}}}, "whitelist filter 0: sourcePod"},
		{"oversized node", Request{Blacklist: []Filter{{}, {Node: []string{long}}}}, "blacklist filter 1: node"},
		{"oversized type", Request{Whitelist: []Filter{{Type: []Type{Type(long)}}}}, "type"},
		{"too many values", Request{Whitelist: []Filter{{SourcePod: many}}}, "at most 256"},
		{"most filters", Request{Whitelist: make([]Filter, MaxFilters), Blacklist: make([]Filter, MaxFilters)}, ""},
		{"too many whitelist filters", Request{Whitelist: make([]Filter, MaxFilters+1)}, "the whitelist has 17 filters, at most 16 are allowed: put the values in fewer filters"},
		{"too many blacklist filters", Request{Blacklist: make([]Filter, MaxFilters+1)}, "the blacklist has 17 filters, at most 16"},
		{"too many bytes", Request{Whitelist: []Filter{{SourcePod: many[:60]}, {Node: slices.Repeat([]string{strings.Repeat("n", 300)}, 60)}}}, "bytes"},
		{"unset IP", Request{Whitelist: []Filter{{SourceIP: []netip.Prefix{{}}}}}, "sourceIP"},
	}
	for _, c := range cases {
		err := c.r.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidFilter) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrInvalidFilter saying %q", c.name, err, c.want)
		}
	}
}

// An IP filter's compiled values select the addresses netip.Prefix.Contains says
// they hold: IPv4 prefixes of any length, host bits set or not, IPv6 ones, an
// IPv4-mapped address only in IPv6 prefixes, a zoned or unset address in none.
func TestIPSetAsContains(t *testing.T) {
	ps := prefixes("0.0.0.0/0", "10.244.0.0/16", "10.244.1.9/24", "10.244.2.7", "192.168.0.0/31", "fd00::/64", "::ffff:10.0.0.0/104", "::/0")
	addrs := []netip.Addr{{}}
	for _, s := range []string{"10.244.1.5", "10.244.2.7", "10.244.2.8", "10.245.0.1", "192.168.0.1", "192.168.0.2", "1.2.3.4",
		"fd00::1", "fd01::1", "::ffff:10.244.1.5", "::ffff:11.0.0.1", "fe80::1%eth0"} {
		addrs = append(addrs, netip.MustParseAddr(s))
	}
	for i := range ps {
		for j := i; j <= len(ps); j++ {
			want := ps[i:j]
			s := newIPSet(want)
			for _, a := range addrs {
				contains := slices.ContainsFunc(want, func(p netip.Prefix) bool { return p.Contains(a) })
				if got := s.match(a); got != contains {
					t.Errorf("%v holds %v: %v, want %v as Contains says", want, a, got, contains)
				}
			}
		}
	}
}
