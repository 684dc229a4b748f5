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
	// mu is taken once per batch of flows (Observe); it guards the tallies, portSet
	// and flags, which count a batch in plain integers and add them to the
	// Prometheus counters when the batch is done: no lock and no atomic add, and no
	// label hashing, per flow.
	mu       sync.Mutex
	reg      *prometheus.Registry
	flows    *prometheus.CounterVec // type, subtype, verdict
	drops    *prometheus.CounterVec // reason, protocol
	tcpFlags *prometheus.CounterVec // flag, family
	icmp     *prometheus.CounterVec // family, type
	portDist *prometheus.CounterVec // protocol, port
	queries  *prometheus.CounterVec // rcode, qtypes, ips_returned
	replies  *prometheus.CounterVec // rcode, qtypes, ips_returned
	portSet  *portSet
	// The tallies of the series a record counts in, each made when it is first
	// counted (a series appears with its first flow), found by an array index or a
	// map lookup of a number, never by hashing labels: processed by type and verdict,
	// flags by tcpFlagNames, ports those with their own label (well-known and
	// tracked), otherPorts the "other" one per protocol ("other", then
	// knownProtocols' four), dropped by reason and protocol (both bounded enums).
	processed  [len(tallyTypes)][2]tally
	flags      [len(tcpFlagNames)]tally
	ports      map[uint32]*tally
	otherPorts [5]tally
	dropped    map[[2]string]*tally
	// dirty are the tallies counted in this batch (count), flushed at its end.
	dirty []*tally
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
	s := &Sink{reg: prometheus.NewRegistry(), portSet: newPortSet(opts.PortsMax),
		dropped: map[[2]string]*tally{}, ports: map[uint32]*tally{}}
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
		s.portDist = vec("port_distribution_total", "Forwarded flows to a destination port, by protocol and port; ports beyond the first tracked ones are counted as port \"other\".", "protocol", "port")
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

// Observe counts each record of rs in every enabled family it belongs to: a whole
// flow by its fields, a compact one by its numbers, without making a Flow of it.
func (s *Sink) Observe(rs []flow.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range rs {
		if f := rs[i].Full; f != nil {
			s.observe(f)
		} else {
			s.observeRecord(&rs[i])
		}
	}
	s.flushTallies()
}

func (s *Sink) observe(f *flow.Flow) {
	if f.Type == flow.TypeLost {
		return // a reader's gap, not a flow
	}
	if s.flows != nil {
		s.countProcessed(f.Type, f.Verdict)
	}
	if s.drops != nil && f.Verdict == flow.Dropped {
		s.countDrop(dropReason(f.DropReason), protocol(f.Protocol))
	}
	if s.tcpFlags != nil && f.TCPFlags != nil && f.Verdict == flow.Forwarded {
		s.countTCPFlags(f.TCPFlags.SYN, f.TCPFlags.ACK, f.TCPFlags.FIN, f.TCPFlags.RST)
	}
	if s.icmp != nil && strings.EqualFold(f.Protocol, "ICMP") {
		s.icmp.WithLabelValues("IPv4", icmpTypeName(f.ICMPType, f.ICMPCode)).Inc()
	}
	if s.portDist != nil && f.Verdict == flow.Forwarded && !f.IsReply && f.DstPort != 0 && f.Type != flow.TypeDNS {
		s.countPort(protocol(f.Protocol), f.DstPort)
	}
	if s.queries != nil && f.Type == flow.TypeDNS && f.DNS != nil {
		s.countDNS(f.DNS)
	}
}

// observeRecord is observe of the Flow r stands for (Record.Into), read from r's
// numbers: what the agent counts for every datapath record.
func (s *Sink) observeRecord(r *flow.Record) {
	verdict := r.Verdict()
	if s.flows != nil {
		s.countProcessed(r.Type, verdict)
	}
	proto := protocolOf(r.Proto)
	if s.drops != nil && verdict == flow.Dropped {
		s.countDrop(dropReason(r.DropReason), proto)
	}
	const syn, ack, fin, rst = flow.TCPFlagSYN, flow.TCPFlagACK, flow.TCPFlagFIN, flow.TCPFlagRST
	if s.tcpFlags != nil && r.Proto == 6 && verdict == flow.Forwarded {
		s.countTCPFlags(r.TCPFlags&syn != 0, r.TCPFlags&ack != 0, r.TCPFlags&fin != 0, r.TCPFlags&rst != 0)
	}
	if r.Proto == 1 { // ICMP: type and code where the ports would be
		if s.icmp != nil {
			s.icmp.WithLabelValues("IPv4", icmpTypeName(uint8(r.SrcPort>>8), uint8(r.SrcPort))).Inc()
		}
		return
	}
	if s.portDist != nil && verdict == flow.Forwarded && !r.IsReply() && r.DstPort != 0 && r.Type != flow.TypeDNS {
		s.countPort(proto, r.DstPort)
	}
	if s.queries != nil && r.Type == flow.TypeDNS && r.DNS != nil {
		s.countDNS(r.DNS)
	}
}

// countPort counts a flow to port: a port with its own label has its tally in
// s.ports; any other shares its protocol's "other" tally without an entry, so a
// server's FIN to each client's ephemeral port adds nothing to keep.
func (s *Sink) countPort(proto string, port uint16) {
	k := portKey(proto, port)
	t := s.ports[k]
	if t == nil {
		if port >= 1024 && s.portSet.full() {
			t = &s.otherPorts[slices.Index(knownProtocols, proto)+1]
			if t.ctr == nil {
				t.ctr = s.portDist.WithLabelValues(proto, "other")
			}
		} else {
			t = &tally{ctr: s.portDist.WithLabelValues(proto, s.portSet.label(proto, port))}
			s.ports[k] = t
		}
	}
	s.count(t)
}

// countProcessed counts a flow of type t with verdict v in flows_processed.
func (s *Sink) countProcessed(t flow.Type, v flow.Verdict) {
	i, j := slices.Index(tallyTypes[:], t), 0
	if v == flow.Dropped {
		j = 1
	}
	if i < 0 || (v != flow.Forwarded && v != flow.Dropped) { // a trace, on request only
		typ, subtype := eventType(t)
		s.flows.WithLabelValues(typ, subtype, string(v)).Inc()
		return
	}
	tl := &s.processed[i][j]
	if tl.ctr == nil {
		typ, subtype := eventType(t)
		tl.ctr = s.flows.WithLabelValues(typ, subtype, string(v))
	}
	s.count(tl)
}

// tallyTypes are the flow types counted in s.processed (the ones datapath records
// and their verdicts have).
var tallyTypes = [...]flow.Type{flow.TypeL3L4, flow.TypeDrop, flow.TypePolicyVerdict, flow.TypeDNS}

// countDrop counts a drop by reason and protocol.
func (s *Sink) countDrop(reason, proto string) {
	k := [2]string{reason, proto}
	t := s.dropped[k]
	if t == nil {
		t = &tally{ctr: s.drops.WithLabelValues(reason, proto)}
		s.dropped[k] = t
	}
	s.count(t)
}

// tally is a series and what the batch counted for it.
type tally struct {
	ctr prometheus.Counter
	n   uint64
}

// count counts one for t in this batch.
func (s *Sink) count(t *tally) {
	if t.n == 0 {
		s.dirty = append(s.dirty, t)
	}
	t.n++
}

// flushTallies adds the batch's tallies to their series.
func (s *Sink) flushTallies() {
	for _, t := range s.dirty {
		t.ctr.Add(float64(t.n))
		t.n = 0
	}
	s.dirty = s.dirty[:0]
}

func (s *Sink) countTCPFlags(syn, ack, fin, rst bool) {
	// Hubble's flags: SYN and SYN-ACK apart, then FIN and RST.
	if syn {
		if ack {
			s.countFlag(tcpFlagSYNACK)
		} else {
			s.countFlag(tcpFlagSYN)
		}
	}
	if fin {
		s.countFlag(tcpFlagFIN)
	}
	if rst {
		s.countFlag(tcpFlagRST)
	}
}

func (s *Sink) countFlag(i int) {
	t := &s.flags[i]
	if t.ctr == nil {
		t.ctr = s.tcpFlags.WithLabelValues(tcpFlagNames[i], "IPv4")
	}
	s.count(t)
}

func (s *Sink) countDNS(d *flow.DNS) {
	qtype := qtypeLabel(d.QType)
	if !d.Response {
		s.queries.WithLabelValues("", qtype, "0").Inc()
		return
	}
	s.replies.WithLabelValues(rcodeLabel(d.RCode), qtype, ipsReturned(len(d.IPs))).Inc()
}
