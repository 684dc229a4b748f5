package flow

import (
	"testing"
	"time"
)

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
		{"pod without namespace is default", Filter{SourcePod: []string{"client"}}, false},
		{"destination pod OR", Filter{DestinationPod: []string{"z/", "y/web-1"}}, true},
		{"source CIDR", Filter{SourceIP: []string{"10.244.1.0/24"}}, true},
		{"destination IP miss", Filter{DestinationIP: []string{"10.244.2.8"}}, false},
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
		if got := c.f.Match(fl); got != c.want {
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
		if got := c.r.Match(fl); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
	if !(Request{Whitelist: []Filter{{Protocol: []string{"tcp"}}}, Since: time.Unix(50, 0)}).Match(lost) {
		t.Error("a TypeLost record must always match")
	}
}
