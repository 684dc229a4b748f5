package flow

import (
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
	return m
}

// Match reports whether the request selects fl: inside [Since, Until], matching any
// of the whitelist (or the whitelist is empty), and none of the blacklist. TypeLost
// records always match: a reader must learn that it missed flows.
func (m *Matcher) Match(fl *Flow) bool {
	if fl.Type == TypeLost {
		return true
	}
	if !m.since.IsZero() && fl.Time.Before(m.since) {
		return false
	}
	if !m.until.IsZero() && fl.Time.After(m.until) {
		return false
	}
	if len(m.whitelist) > 0 && !slices.ContainsFunc(m.whitelist, func(c compiled) bool { return c.match(fl) }) {
		return false
	}
	return !slices.ContainsFunc(m.blacklist, func(c compiled) bool { return c.match(fl) })
}

// compiled is a Filter with its pod values indexed. It selects a flow when every
// non-empty field matches (AND), and within a field any one value (OR).
type compiled struct {
	Filter
	sourcePods, destinationPods podSet
}

func compile(f Filter) compiled {
	return compiled{Filter: f, sourcePods: newPodSet(f.SourcePod), destinationPods: newPodSet(f.DestinationPod)}
}

func (f compiled) match(fl *Flow) bool {
	return (len(f.SourcePod) == 0 || f.sourcePods.match(fl.Source)) &&
		(len(f.DestinationPod) == 0 || f.destinationPods.match(fl.Destination)) &&
		ipMatch(f.SourceIP, fl.Source.IP) &&
		ipMatch(f.DestinationIP, fl.Destination.IP) &&
		matchAny(f.SourceService, noSourceService) &&
		matchAny(f.DestinationService, func(s string) bool { return serviceMatch(s, fl.Service) }) &&
		matchAny(f.Verdict, func(v Verdict) bool { return strings.EqualFold(string(v), string(fl.Verdict)) }) &&
		matchAny(f.Protocol, func(p string) bool { return protocolMatch(p, fl.Protocol) }) &&
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

// ipMatch reports whether ip (a flow's address) is in any of want (all when empty).
// Only the flow's own address is parsed, once per field: the filter's values were
// parsed when the filter came in.
func ipMatch(want []netip.Prefix, ip string) bool {
	if len(want) == 0 {
		return true
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(want, func(p netip.Prefix) bool { return p.Contains(a) })
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

// protocolMatch matches a protocol name in any case or its number.
func protocolMatch(want, proto string) bool {
	if strings.EqualFold(want, proto) {
		return true
	}
	n, err := strconv.Atoi(want)
	return err == nil && ProtocolName(uint8(n)) == proto
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
