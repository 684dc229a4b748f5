package flowmetrics

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/myelin-net/myelin/internal/flow"
)

// hubbleNamespace is Hubble's metric prefix.
const hubbleNamespace = "hubble"

// Sink counts flows into the enabled families. It is a flow.Sink: Observe only
// increments counters (no I/O, nothing kept of the flows) and is safe for
// concurrent use.
type Sink struct {
	// mu is taken once per batch of flows (Observe); it guards counters, portSet and
	// flags, which count a batch in plain integers and add them to the Prometheus
	// counters when the batch is done: no lock and no atomic add per flow.
	mu       sync.Mutex
	reg      *prometheus.Registry
	flows    *prometheus.CounterVec // type, subtype, verdict
	drops    *prometheus.CounterVec // reason, protocol
	tcpFlags *prometheus.CounterVec // flag, family
	icmp     *prometheus.CounterVec // family, type
	ports    *prometheus.CounterVec // protocol, port
	queries  *prometheus.CounterVec // rcode, qtypes, ips_returned
	replies  *prometheus.CounterVec // rcode, qtypes, ips_returned
	portSet  *portSet
	counters counterCache
	// flags are tcpFlags' four series (tcpFlagNames), each made when it is first
	// counted (a series appears with its first flow), and the batch's counts: a TCP
	// connection makes several flows, each counted here, without the cache's lookup.
	flags [len(tcpFlagNames)]struct {
		ctr prometheus.Counter
		n   uint64
	}
}

// tcpFlagNames are Hubble's flag labels, indexed by the tcpFlag* constants.
var tcpFlagNames = [...]string{"SYN", "SYN-ACK", "FIN", "RST"}

const (
	tcpFlagSYN = iota
	tcpFlagSYNACK
	tcpFlagFIN
	tcpFlagRST
)

var _ flow.Sink = (*Sink)(nil)

// New returns a Sink counting the families named (see ParseFamilies); its
// Registry holds exactly those families.
func New(families []string, opts Options) *Sink {
	s := &Sink{reg: prometheus.NewRegistry(), portSet: newPortSet(opts.PortsMax)}
	on := func(f string) bool { return slices.Contains(families, f) }
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: hubbleNamespace, Name: name, Help: help}, labels)
		s.reg.MustRegister(v)
		return v
	}
	if on(FamilyFlow) {
		s.flows = vec("flows_processed_total", "Flows processed, by event type (Trace, Drop, PolicyVerdict, L7), subtype (DNS for L7) and verdict.", "type", "subtype", "verdict")
	}
	if on(FamilyDrop) {
		s.drops = vec("drop_total", "Dropped flows, by drop reason (the datapath's reason without DROP_) and protocol.", "reason", "protocol")
	}
	if on(FamilyTCP) {
		s.tcpFlags = vec("tcp_flags_total", "Forwarded TCP flows by flag (SYN, SYN-ACK, FIN, RST) and IP family.", "flag", "family")
	}
	if on(FamilyICMP) {
		s.icmp = vec("icmp_total", "ICMP flows by IP family and ICMP type.", "family", "type")
	}
	if on(FamilyPortDistribution) {
		s.ports = vec("port_distribution_total", "Forwarded flows to a destination port, by protocol and port; ports beyond the first tracked ones are counted as port \"other\".", "protocol", "port")
	}
	if on(FamilyDNS) {
		s.queries = vec("dns_queries_total", "DNS queries seen on UDP/53, by rcode (empty), query type and answers returned (0).", "rcode", "qtypes", "ips_returned")
		s.replies = vec("dns_responses_total", "DNS responses seen on UDP/53, by rcode, query type and A/AAAA answers returned (10 or more: \"10+\").", "rcode", "qtypes", "ips_returned")
	}
	return s
}

// Options bound what the Sink tracks.
type Options struct {
	// PortsMax is how many distinct (protocol, port) pairs port distribution gives
	// their own series; 0 means DefaultPortsMax.
	PortsMax int
}

// Registry is what the HTTP handler serves.
func (s *Sink) Registry() *prometheus.Registry { return s.reg }

// Observe counts each flow of fs in every enabled family it belongs to.
func (s *Sink) Observe(fs []flow.Flow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range fs {
		s.observe(&fs[i])
	}
	s.counters.flush()
	s.flushFlags()
}

func (s *Sink) observe(f *flow.Flow) {
	if f.Type == flow.TypeLost {
		return // a reader's gap, not a flow
	}
	if s.flows != nil {
		typ, subtype := eventType(f.Type)
		s.counters.inc(s.flows, typ, subtype, string(f.Verdict))
	}
	if s.drops != nil && f.Verdict == flow.Dropped {
		s.counters.inc(s.drops, dropReason(f.DropReason), protocol(f.Protocol))
	}
	if s.tcpFlags != nil && f.TCPFlags != nil && f.Verdict == flow.Forwarded {
		s.countTCPFlags(f.TCPFlags)
	}
	if s.icmp != nil && strings.EqualFold(f.Protocol, "ICMP") {
		s.icmp.WithLabelValues("IPv4", icmpTypeName(f.ICMPType, f.ICMPCode)).Inc()
	}
	if s.ports != nil && f.Verdict == flow.Forwarded && !f.IsReply && f.DstPort != 0 && f.Type != flow.TypeDNS {
		s.countPort(protocol(f.Protocol), f.DstPort)
	}
	if s.queries != nil && f.Type == flow.TypeDNS && f.DNS != nil {
		s.countDNS(f.DNS)
	}
}

// countPort counts a flow to port. Ports labelled "other" share one cached series:
// cached per port, a server's FIN to each client's ephemeral port filled the counter
// cache, and every later label set paid the vector's label hashing.
func (s *Sink) countPort(proto string, port uint16) {
	if s.portSet.other(proto, port) {
		s.counters.inc(s.ports, proto, "other")
		return
	}
	s.counters.count(counterKey{vec: s.ports, a: proto, port: port}, func() prometheus.Counter {
		return s.ports.WithLabelValues(proto, s.portSet.label(proto, port)) // decided once per port
	})
}

func (s *Sink) countTCPFlags(fl *flow.TCPFlags) {
	// Hubble's flags: SYN and SYN-ACK apart, then FIN and RST.
	if fl.SYN {
		if fl.ACK {
			s.flags[tcpFlagSYNACK].n++
		} else {
			s.flags[tcpFlagSYN].n++
		}
	}
	if fl.FIN {
		s.flags[tcpFlagFIN].n++
	}
	if fl.RST {
		s.flags[tcpFlagRST].n++
	}
}

// flushFlags adds the batch's flag counts to their series, made on first use.
func (s *Sink) flushFlags() {
	for i := range s.flags {
		fl := &s.flags[i]
		if fl.n == 0 {
			continue
		}
		if fl.ctr == nil {
			fl.ctr = s.tcpFlags.WithLabelValues(tcpFlagNames[i], "IPv4")
		}
		fl.ctr.Add(float64(fl.n))
		fl.n = 0
	}
}

func (s *Sink) countDNS(d *flow.DNS) {
	qtype := qtypeLabel(d.QType)
	if !d.Response {
		s.queries.WithLabelValues("", qtype, "0").Inc()
		return
	}
	s.replies.WithLabelValues(rcodeLabel(d.RCode), qtype, ipsReturned(len(d.IPs))).Inc()
}
