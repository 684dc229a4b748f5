package flowmetrics

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/flow"
)

// eventType is Hubble's type and subtype label for a flow's event type.
func eventType(t flow.Type) (typ, subtype string) {
	switch t {
	case flow.TypeDrop:
		return "Drop", ""
	case flow.TypePolicyVerdict:
		return "PolicyVerdict", ""
	case flow.TypeDNS:
		return "L7", "DNS"
	case flow.TypeL3L4, flow.TypeTrace:
		return "Trace", ""
	}
	return "Unknown", ""
}

// dropReason is the datapath's reason without its DROP_ prefix, as Hubble names
// reasons (POLICY_DENIED); the datapath's reasons are a fixed enum.
func dropReason(r string) string {
	if r == "" {
		return "UNKNOWN_REASON"
	}
	return strings.TrimPrefix(r, "DROP_")
}

// knownProtocols are the protocol label's values; any other protocol is "other".
var knownProtocols = []string{"TCP", "UDP", "ICMP", "SCTP"}

// protocolOf is protocol of an IP protocol number.
func protocolOf(p uint8) string {
	switch p {
	case 1, 6, 17, 132: // knownProtocols
		return flow.ProtocolName(p)
	}
	return "other"
}

func protocol(p string) string {
	if !slices.Contains(knownProtocols, p) { // flow.ProtocolName's are upper case already
		p = strings.ToUpper(p)
	}
	if slices.Contains(knownProtocols, p) {
		return p
	}
	return "other"
}

// icmpTypeNames are the ICMPv4 types by Hubble's names; others are "Type<n>"
// (at most 256 values).
var icmpTypeNames = map[uint8]string{
	0: "EchoReply", 3: "DestinationUnreachable", 4: "SourceQuench", 5: "Redirect",
	8: "EchoRequest", 11: "TimeExceeded", 12: "ParameterProblem", 13: "TimestampRequest", 14: "TimestampReply",
}

// icmpUnreachableCodes name the codes of DestinationUnreachable, as Hubble does.
var icmpUnreachableCodes = map[uint8]string{
	0: "Net", 1: "Host", 2: "Protocol", 3: "Port", 4: "FragmentationNeeded", 13: "AdministrativelyProhibited",
}

func icmpTypeName(typ, code uint8) string {
	name, ok := icmpTypeNames[typ]
	if !ok {
		return fmt.Sprintf("Type%d", typ)
	}
	if typ == 3 {
		if c, ok := icmpUnreachableCodes[code]; ok {
			return name + "(" + c + ")"
		}
	}
	return name
}

// knownQTypes are the DNS query types with their own qtypes value; others are "other".
var knownQTypes = []string{"A", "AAAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT", "ANY", "CAA", "HTTPS", "SVCB"}

func qtypeLabel(q string) string {
	if slices.Contains(knownQTypes, q) {
		return q
	}
	return "other"
}

// rcodeLabel keeps flow.ParseDNS's names (the header's four bits: at most 16 values).
func rcodeLabel(r string) string {
	if r == "" {
		return "NOERROR"
	}
	return r
}

// ipsReturned is the answer count, 10 and more as "10+".
func ipsReturned(n int) string {
	if n >= 10 {
		return "10+"
	}
	return strconv.Itoa(n)
}

// DefaultPortsMax is how many distinct (protocol, port) pairs port distribution
// tracks by default; every port below 1024 is tracked besides them.
const DefaultPortsMax = 128

// portSet decides the port label: well-known ports (below 1024) always by number;
// of the others, the first max distinct (protocol, port) pairs seen by number, and
// every later one "other". Series: at most 4 protocols x 1024 well-known ports
// (only those in use appear) + max. Not safe for concurrent use (the Sink's lock
// guards it).
type portSet struct {
	max  int
	seen map[uint32]bool // portKey's
}

// portKey is one protocol's port, as one number: the map hashes it fast (a
// record to an ephemeral port asks for one).
func portKey(proto string, port uint16) uint32 {
	i := slices.Index(knownProtocols, proto) // -1 for "other"
	return uint32(i+1)<<16 | uint32(port)
}

func newPortSet(max int) *portSet {
	if max <= 0 {
		max = DefaultPortsMax
	}
	return &portSet{max: max, seen: map[uint32]bool{}}
}

// full: no room to track another port; a port not tracked yet is "other".
func (p *portSet) full() bool { return len(p.seen) >= p.max }

func (p *portSet) label(proto string, port uint16) string {
	v := strconv.Itoa(int(port))
	if port < 1024 {
		return v
	}
	key := portKey(proto, port)
	if p.seen[key] {
		return v
	}
	if len(p.seen) >= p.max {
		return "other"
	}
	p.seen[key] = true
	return v
}
