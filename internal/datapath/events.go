package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/ringbuf"
)

// Event is one datapath event from the ring buffer.
type Event struct {
	// Type is "drop" or "trace".
	Type string
	// Reason is a ReasonName; Direction a DirectionName.
	Reason    string
	Direction string
	// IfIndex is the device the program ran on.
	IfIndex int
	// Src and Dst are the IPv4 addresses; zero Addr for non-IPv4 packets
	// and packets dropped before their header was parsed.
	Src, Dst netip.Addr
	// Proto is the IPv4 protocol number.
	Proto uint8
	// SrcPort and DstPort are set for TCP and UDP (not later fragments).
	SrcPort, DstPort uint16
	// Len is the packet length including the Ethernet header.
	Len uint32
}

// EventReader reads datapath events. Use one reader per consumer.
type EventReader struct {
	rd *ringbuf.Reader
}

// NewEventReader opens a reader on the events ring buffer. Events written
// while no reader drains the buffer are kept until it is full; after that
// they are counted as EVENTS_LOST.
func (d *Datapath) NewEventReader() (*EventReader, error) {
	rd, err := ringbuf.NewReader(d.objs.MyelinEvents)
	if err != nil {
		return nil, fmt.Errorf("open events reader: %w", err)
	}
	return &EventReader{rd: rd}, nil
}

// Read blocks until the next event. After Close it returns an error
// wrapping os.ErrClosed.
func (r *EventReader) Read() (Event, error) {
	rec, err := r.rd.Read()
	if err != nil {
		return Event{}, fmt.Errorf("read event: %w", err)
	}
	var raw myelinEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &raw); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	return decodeEvent(raw), nil
}

// Close stops the reader and unblocks Read.
func (r *EventReader) Close() error {
	if err := r.rd.Close(); err != nil {
		return fmt.Errorf("close events reader: %w", err)
	}
	return nil
}

// decodeEvent converts the C event to its Go form.
func decodeEvent(raw myelinEvent) Event {
	ev := Event{
		Type:      eventTypeName(myelinEventType(raw.Type)),
		Reason:    ReasonName(raw.Reason),
		Direction: DirectionName(raw.Dir),
		IfIndex:   int(raw.Ifindex),
		Proto:     raw.Proto,
		SrcPort:   ntohs(raw.Sport),
		DstPort:   ntohs(raw.Dport),
		Len:       raw.Len,
	}
	if raw.Saddr != 0 || raw.Daddr != 0 {
		ev.Src = addrFromNetwork(raw.Saddr)
		ev.Dst = addrFromNetwork(raw.Daddr)
	}
	return ev
}

// eventTypeName names an event type: "drop", "trace", or "type-<n>" for unknown ones.
func eventTypeName(t myelinEventType) string {
	switch t {
	case myelinEventTypeEVENT_DROP:
		return "drop"
	case myelinEventTypeEVENT_TRACE:
		return "trace"
	}
	return fmt.Sprintf("type-%d", t)
}

// addrFromNetwork turns a network-order address loaded as a host integer back into an Addr.
func addrFromNetwork(v uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// htons is port v in network order, as the datapath stores it when loaded as a host integer.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// ntohs turns a network-order port loaded as a host integer into its value.
func ntohs(v uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
}
