package flow

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Matcher is a Request compiled for matching many flows: its pod values are parsed
// once and indexed by namespace, so a flow's pod is compared with the values of its
// own namespace only (a follower's filters run on every flow the node adds).
type Matcher struct {
	since, until         time.Time
	whitelist, blacklist []compiled
	ips                  bool // a filter has IP values: Match parses the flow's addresses
}

// Matcher compiles r.
func (r Request) Matcher() *Matcher {
	m := &Matcher{since: r.Since, until: r.Until}
	for _, f := range r.Whitelist {
		m.whitelist = append(m.whitelist, compile(f))
	}
	for _, f := range r.Blacklist {
		m.blacklist = append(m.blacklist, compile(f))
	}
	for _, c := range slices.Concat(m.whitelist, m.blacklist) {
		m.ips = m.ips || len(c.SourceIP) > 0 || len(c.DestinationIP) > 0
	}
	return m
}

// Match reports whether the request selects fl: inside [Since, Until], matching any
// of the whitelist (or the whitelist is empty), and none of the blacklist. TypeLost
// records always match: a reader must learn that it missed flows. fl's addresses are
// parsed once, and only when the request has IP filters.
func (m *Matcher) Match(fl *Flow) bool {
	var a Addrs
	if m.NeedsAddrs() {
		a = AddrsOf(fl)
	}
	return m.MatchAddrs(fl, a)
}

// NeedsAddrs says whether the request has IP filters, which compare a flow's
// addresses parsed (MatchAddrs): without, the zero Addrs do.
func (m *Matcher) NeedsAddrs() bool { return m.ips }

// MatchAddrs is Match with fl's addresses parsed by the caller (AddrsOf): the flow
// store parses a new flow's once for all its followers.
func (m *Matcher) MatchAddrs(fl *Flow, a Addrs) bool {
	if fl.Type == TypeLost {
		return true
	}
	if !m.since.IsZero() && fl.Time.Before(m.since) {
		return false
	}
	if !m.until.IsZero() && fl.Time.After(m.until) {
		return false
	}
	if len(m.whitelist) > 0 && !anyMatch(m.whitelist, fl, a) {
		return false
	}
	return !anyMatch(m.blacklist, fl, a)
}

// Addrs are a flow's addresses parsed, what IP filters compare: a flow carries them
// as text (Endpoint.IP), and parsing them per filter made every filter cost two
// parses per flow.
type Addrs struct{ Source, Destination netip.Addr }

// AddrsOf parses fl's addresses; one that is empty or malformed is the zero Addr,
// which no IP filter selects.
func AddrsOf(fl *Flow) Addrs {
	src, _ := netip.ParseAddr(fl.Source.IP)
	dst, _ := netip.ParseAddr(fl.Destination.IP)
	return Addrs{Source: src, Destination: dst}
}

// anyMatch reports whether one of cs selects fl (by index: a compiled is too large to
// copy per filter and flow).
func anyMatch(cs []compiled, fl *Flow, a Addrs) bool {
	for i := range cs {
		if cs[i].match(fl, a) {
			return true
		}
	}
	return false
}

// compiled is a Filter with its pod values indexed, its IP and protocol values in
// the form a flow is compared with. It selects a flow when every non-empty field
// matches (AND), and within a field any one value (OR).
type compiled struct {
	Filter
	sourcePods, destinationPods podSet
	sourceIPs, destinationIPs   ipSet
	protocols                   []protocolValue
}

func compile(f Filter) compiled {
	c := compiled{Filter: f, sourcePods: newPodSet(f.SourcePod), destinationPods: newPodSet(f.DestinationPod),
		sourceIPs: newIPSet(f.SourceIP), destinationIPs: newIPSet(f.DestinationIP)}
	for _, p := range f.Protocol {
		c.protocols = append(c.protocols, newProtocolValue(p))
	}
	return c
}

func (f *compiled) match(fl *Flow, a Addrs) bool {
	return (len(f.SourcePod) == 0 || f.sourcePods.match(fl.Source)) &&
		(len(f.DestinationPod) == 0 || f.destinationPods.match(fl.Destination)) &&
		(len(f.SourceIP) == 0 || f.sourceIPs.match(a.Source)) &&
		(len(f.DestinationIP) == 0 || f.destinationIPs.match(a.Destination)) &&
		matchAny(f.SourceService, noSourceService) &&
		matchAny(f.DestinationService, func(s string) bool { return serviceMatch(s, fl.Service) }) &&
		matchAny(f.Verdict, func(v Verdict) bool { return strings.EqualFold(string(v), string(fl.Verdict)) }) &&
		matchAny(f.protocols, func(p protocolValue) bool { return p.match(fl.Protocol) }) &&
		matchAny(f.Type, func(t Type) bool { return strings.EqualFold(string(t), string(fl.Type)) }) &&
		matchAny(f.Node, func(n string) bool { return n == fl.Node }) &&
		matchAny(f.Port, func(p uint16) bool { return p == fl.SrcPort || p == fl.DstPort }) &&
		matchAny(f.Direction, func(d Direction) bool { return strings.EqualFold(string(d), string(fl.Direction)) })
}

func matchAny[T any](vals []T, match func(T) bool) bool {
	return len(vals) == 0 || slices.ContainsFunc(vals, match)
}

// noSourceService: a Flow records only the Service it was addressed to, so a source
// Service filter selects nothing rather than everything.
func noSourceService(string) bool { return false }

// podSet holds pod filter values, "namespace/name-prefix" or "namespace/" (the
// whole namespace), by namespace; as in Hubble, a value without a slash names a pod
// in the default namespace.
type podSet map[string][]string

func newPodSet(vals []string) podSet {
	if len(vals) == 0 {
		return nil
	}
	s := podSet{}
	for _, v := range vals {
		ns, name, ok := strings.Cut(v, "/")
		if !ok {
			ns, name = "default", v
		}
		s[ns] = append(s[ns], name)
	}
	return s
}

// match reports whether ep is a pod that one of s's values names.
func (s podSet) match(ep Endpoint) bool {
	if ep.Pod == "" {
		return false
	}
	return slices.ContainsFunc(s[ep.Namespace], func(name string) bool { return strings.HasPrefix(ep.Pod, name) })
}

// ipSet holds IP filter values (parsed when the filter came in) in the form a
// flow's parsed address is compared with: an IPv4 prefix as its masked address and
// mask, one AND and compare per value (netip.Prefix.Contains costs ~4 ns, and a
// request may hold MaxFilterValues of them for every flow), others as they are.
type ipSet struct {
	v4    []v4Prefix
	other []netip.Prefix
}

type v4Prefix struct{ addr, mask uint32 }

func newIPSet(want []netip.Prefix) ipSet {
	var s ipSet
	for _, p := range want {
		switch {
		case !p.IsValid(): // selects nothing, as Contains says
		case p.Addr().Is4():
			a, mask := p.Addr().As4(), ^uint32(0)
			if p.Bits() < 32 {
				mask = ^(^uint32(0) >> p.Bits())
			}
			s.v4 = append(s.v4, v4Prefix{addr: binary.BigEndian.Uint32(a[:]) & mask, mask: mask})
		default:
			s.other = append(s.other, p)
		}
	}
	return s
}

// match reports whether ip (a flow's address, parsed once per flow) is in one of
// s's prefixes, as netip.Prefix.Contains says: an IPv4 address is in IPv4 prefixes
// only, an IPv4-mapped IPv6 one in IPv6 prefixes only, an invalid one in none.
func (s *ipSet) match(ip netip.Addr) bool {
	if ip.Is4() {
		b := ip.As4()
		a := binary.BigEndian.Uint32(b[:])
		for _, p := range s.v4 {
			if a&p.mask == p.addr {
				return true
			}
		}
		return false
	}
	return ip.IsValid() && slices.ContainsFunc(s.other, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// serviceMatch matches "namespace/name" or "namespace/" against "namespace/name".
func serviceMatch(want, svc string) bool {
	if svc == "" {
		return false
	}
	if strings.HasSuffix(want, "/") {
		return strings.HasPrefix(svc, want)
	}
	return want == svc
}

// protocolValue is a protocol filter value: a name, matched in any case, and, when
// the value is a number, the name Flow.Protocol gives that number (resolved when
// the filter is compiled, not per flow).
type protocolValue struct{ name, numbered string }

func newProtocolValue(want string) protocolValue {
	p := protocolValue{name: want}
	if n, err := strconv.Atoi(want); err == nil {
		p.numbered = ProtocolName(uint8(n))
	}
	return p
}

func (p protocolValue) match(proto string) bool {
	return strings.EqualFold(p.name, proto) || (p.numbered != "" && p.numbered == proto)
}

// ProtocolName names an IP protocol number as Flow.Protocol does.
func ProtocolName(p uint8) string {
	switch p {
	case 1:
		return "ICMP"
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 132:
		return "SCTP"
	}
	return strconv.Itoa(int(p))
}
