package flow

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Match reports whether f selects fl: every non-empty field must match (AND), and
// within a field any one value (OR).
func (f Filter) Match(fl *Flow) bool {
	return matchAny(f.SourcePod, func(p string) bool { return podMatch(p, fl.Source) }) &&
		matchAny(f.DestinationPod, func(p string) bool { return podMatch(p, fl.Destination) }) &&
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

// Match reports whether r selects fl: inside [Since, Until], matching any of the
// whitelist (or the whitelist is empty), and none of the blacklist. TypeLost records
// always match: a reader must learn that it missed flows.
func (r Request) Match(fl *Flow) bool {
	if fl.Type == TypeLost {
		return true
	}
	if !r.Since.IsZero() && fl.Time.Before(r.Since) {
		return false
	}
	if !r.Until.IsZero() && fl.Time.After(r.Until) {
		return false
	}
	if len(r.Whitelist) > 0 && !slices.ContainsFunc(r.Whitelist, func(f Filter) bool { return f.Match(fl) }) {
		return false
	}
	return !slices.ContainsFunc(r.Blacklist, func(f Filter) bool { return f.Match(fl) })
}

func matchAny[T any](vals []T, match func(T) bool) bool {
	return len(vals) == 0 || slices.ContainsFunc(vals, match)
}

// noSourceService: a Flow records only the Service it was addressed to, so a source
// Service filter selects nothing rather than everything.
func noSourceService(string) bool { return false }

// podMatch matches "namespace/name-prefix" or "namespace/" (the whole namespace);
// as in Hubble, a value without a slash names a pod in the default namespace.
func podMatch(want string, ep Endpoint) bool {
	if ep.Pod == "" {
		return false
	}
	ns, name, ok := strings.Cut(want, "/")
	if !ok {
		ns, name = "default", want
	}
	if ns != ep.Namespace {
		return false
	}
	return name == "" || strings.HasPrefix(ep.Pod, name)
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
