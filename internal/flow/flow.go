// Package flow is the node's flow record and how its consumers read it: the agent's
// flow store (history and live followers), `myelin observe`, the Hubble Observer API,
// the relay, the flow metrics and the service map all speak this type. A Flow is
// what the datapath reported about one connection or packet, resolved to pods and
// Services by the agent.
package flow

import (
	"context"
	"net/netip"
	"time"
)

// Verdict is what the datapath did with the traffic. The names are Hubble's.
type Verdict string

const (
	Forwarded Verdict = "FORWARDED"
	Dropped   Verdict = "DROPPED"
	Traced    Verdict = "TRACED" // a packet trace event (on request only)
)

// Type is the kind of event a flow came from. The names follow Hubble's event types.
type Type string

const (
	TypeL3L4          Type = "L3_L4"          // a new connection, a state change or a periodic summary
	TypeDrop          Type = "DROP"           // a dropped packet, with its reason
	TypePolicyVerdict Type = "POLICY_VERDICT" // a NetworkPolicy decision on a new connection
	TypeTrace         Type = "TRACE"          // a traced packet (myelin monitor --type trace)
	TypeDNS           Type = "DNS"            // a DNS query or response seen on UDP/53
	TypeLost          Type = "LOST"           // Lost flows were not delivered to this reader
)

// Direction is the traffic direction relative to the pod the flow was observed at.
type Direction string

const (
	Ingress Direction = "INGRESS"
	Egress  Direction = "EGRESS"
)

// Endpoint is one side of a flow: an IP and, when the agent knows it, the pod.
type Endpoint struct {
	IP        string            `json:"ip"`
	Namespace string            `json:"namespace,omitempty"`
	Pod       string            `json:"pod,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Identity  uint32            `json:"identity,omitempty"` // the policy identity, 0 if none
	Node      string            `json:"node,omitempty"`     // the node the pod runs on, when known
}

// TCPFlags are the flags seen on the packet(s) a flow reports.
type TCPFlags struct {
	SYN bool `json:"syn,omitempty"`
	ACK bool `json:"ack,omitempty"`
	FIN bool `json:"fin,omitempty"`
	RST bool `json:"rst,omitempty"`
	PSH bool `json:"psh,omitempty"`
}

// DNS is what a flow of Type DNS carried.
type DNS struct {
	// Query is the queried name with its trailing dot, in the zone-file presentation
	// form: any byte but visible ASCII is written "\DDD", a dot or backslash inside a
	// label "\." or "\\" (RFC 1035 §5.1, RFC 4343 §2.1). A pod chooses the names it
	// queries, and a label may hold any byte; escaped, a name is always printable.
	Query    string   `json:"query"`
	QType    string   `json:"qtype"`              // "A", "AAAA", ...
	Response bool     `json:"response,omitempty"` // false for a query
	RCode    string   `json:"rcode,omitempty"`    // "NOERROR", "NXDOMAIN", ... (responses)
	IPs      []string `json:"ips,omitempty"`      // answers (responses)
}

// Flow is one record. Zero values mean "not known" or "not applicable".
type Flow struct {
	Time        time.Time `json:"time"`
	Node        string    `json:"node"` // the node that observed it
	Type        Type      `json:"type"`
	Verdict     Verdict   `json:"verdict"`
	DropReason  string    `json:"dropReason,omitempty"` // datapath reason name, e.g. DROP_POLICY_DENIED
	Direction   Direction `json:"direction,omitempty"`
	Source      Endpoint  `json:"source"`
	Destination Endpoint  `json:"destination"`
	Protocol    string    `json:"protocol"` // TCP, UDP, ICMP, SCTP or the number
	SrcPort     uint16    `json:"srcPort,omitempty"`
	DstPort     uint16    `json:"dstPort,omitempty"`
	TCPFlags    *TCPFlags `json:"tcpFlags,omitempty"`
	ICMPType    uint8     `json:"icmpType,omitempty"`
	ICMPCode    uint8     `json:"icmpCode,omitempty"`
	IsReply     bool      `json:"isReply,omitempty"`
	// Service is the Service the traffic was addressed to, "namespace/name", when it
	// went through Service translation.
	Service string `json:"service,omitempty"`
	// Policies are the NetworkPolicies that allowed (or, empty on a drop, denied) it.
	Policies    []string `json:"policies,omitempty"`
	HostRouting string   `json:"hostRouting,omitempty"` // "bpf" or "legacy"
	// Packets and Bytes count what an aggregated record summarises (0 for a single packet).
	Packets uint64 `json:"packets,omitempty"`
	Bytes   uint64 `json:"bytes,omitempty"`
	DNS     *DNS   `json:"dns,omitempty"`
	// Lost is, on a TypeLost record, how many flows this reader or the kernel ring lost.
	Lost uint64 `json:"lost,omitempty"`
}

// Request is what a reader asks of a Source.
type Request struct {
	// Whitelist: a flow is returned if it matches any filter (all if empty).
	Whitelist []Filter
	// Blacklist: a flow matching any of these is never returned.
	Blacklist []Filter
	// Last is how many of the newest stored flows to return first (0: none when
	// following, all stored otherwise).
	Last int
	// Follow keeps the stream open for new flows until ctx ends.
	Follow bool
	// Since and Until bound Time when set.
	Since, Until time.Time
}

// Filter selects flows. Fields are ANDed; the values within one field are ORed; an
// empty field matches everything. Pod values are "namespace/name", or "namespace/"
// for a whole namespace (Hubble's form). IP values are parsed where a filter comes in
// (ParseIP, the JSON form, Hubble's FlowFilter), never per flow matched: an address
// is its /32 or /128 prefix.
type Filter struct {
	SourcePod          []string       `json:"sourcePod,omitempty"`
	DestinationPod     []string       `json:"destinationPod,omitempty"`
	SourceIP           []netip.Prefix `json:"sourceIP,omitempty"` // IPs or CIDRs
	DestinationIP      []netip.Prefix `json:"destinationIP,omitempty"`
	SourceService      []string       `json:"sourceService,omitempty"` // "namespace/name"
	DestinationService []string       `json:"destinationService,omitempty"`
	Verdict            []Verdict      `json:"verdict,omitempty"`
	Protocol           []string       `json:"protocol,omitempty"` // tcp, udp, icmp, sctp (any case)
	Type               []Type         `json:"type,omitempty"`
	Node               []string       `json:"node,omitempty"`
	Port               []uint16       `json:"port,omitempty"` // either port
	Direction          []Direction    `json:"direction,omitempty"`
}

// Source serves flows: the agent's store on one node, or a merge of several nodes.
// Flows sends the stored part, then, with Follow, new flows until ctx ends, and
// returns; it never closes out. A reader that falls behind a following stream loses
// flows rather than making the source buffer without bound: it gets a TypeLost record
// saying how many it missed.
type Source interface {
	Flows(ctx context.Context, req Request, out chan<- *Flow) error
}

// Sink sees every flow a node produces, in order, as it is stored: a batch at a time
// (what the node's reader found in the datapath's ring at once), as Records. Observe
// must not block or keep rs (flow metrics are a Sink).
type Sink interface {
	Observe(rs []Record)
}
