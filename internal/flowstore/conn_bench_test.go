package flowstore

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowmetrics"
)

// connRecords are the four records a same-node TCP_CRR connection makes with BPF host
// routing (bpf/lib/flows.h): the client's SYN, the server's SYN-ACK, and both FINs.
func connRecords(clientPort uint16) [4][]byte {
	rec := func(src, dst [4]byte, sport, dport uint16, flags byte) []byte {
		b := rawTCP()
		copy(b[24:28], src[:])
		copy(b[28:32], dst[:])
		binary.BigEndian.PutUint16(b[44:], sport)
		binary.BigEndian.PutUint16(b[46:], dport)
		b[56] = flags
		return b
	}
	c, s := [4]byte{10, 244, 1, 5}, [4]byte{10, 244, 1, 7}
	return [4][]byte{
		rec(c, s, clientPort, 12866, flow.TCPFlagSYN),
		rec(s, c, 12866, clientPort, flow.TCPFlagSYN|flow.TCPFlagACK),
		rec(c, s, clientPort, 12866, flow.TCPFlagFIN|flow.TCPFlagACK),
		rec(s, c, 12866, clientPort, flow.TCPFlagFIN|flow.TCPFlagACK),
	}
}

// connReader hands out n connections' records, as many at a time as the batch holds
// (a busy ring), then io.EOF.
type connReader struct {
	n, i int
	boot time.Time
	recs [4][]byte
}

func (r *connReader) ReadBatch(recs []datapath.FlowRecord) (int, error) {
	if r.i == 4*r.n {
		return 0, io.EOF
	}
	n := 0
	for ; n < len(recs) && r.i < 4*r.n; n++ {
		if r.i%4 == 0 {
			r.recs = connRecords(uint16(32768 + (r.i/4)%28000)) // ephemeral client ports
		}
		if err := recs[n].Decode(r.recs[r.i%4], r.boot); err != nil {
			return 0, err
		}
		r.i++
	}
	return n, nil
}

func (r *connReader) Close() error { return nil }

// podResolver names both pods, one shared Endpoint each, as the agent's resolver does.
type podResolver struct{ client, server *flow.Endpoint }

func newPodResolver() podResolver {
	labels := map[string]string{"app": "netperf"}
	return podResolver{
		client: &flow.Endpoint{IP: "10.244.1.5", Namespace: "bench", Pod: "client", Labels: labels, Node: "n1"},
		server: &flow.Endpoint{IP: "10.244.1.7", Namespace: "bench", Pod: "server", Labels: labels, Node: "n1"},
	}
}

func (p podResolver) Endpoint(ip netip.Addr) *flow.Endpoint {
	if ip == netip.AddrFrom4([4]byte{10, 244, 1, 5}) {
		return p.client
	}
	return p.server
}

func (podResolver) Service(netip.AddrPort, uint8) string { return "" }

// BenchmarkConnectionRecords is what the agent's Feed spends per TCP_CRR connection
// (four records: decode, convert, resolve, store, all six metric families), ephemeral
// client ports included. Not included: reading the ring and the boot time. Building the
// raw records (rawTCP) is the benchmark's own cost: its 4 allocations per connection.
func BenchmarkConnectionRecords(b *testing.B) {
	s := New(4095)
	s.AddSink(flowmetrics.New([]string{"dns", "drop", "tcp", "flow", "icmp", "port-distribution"}, flowmetrics.Options{}))
	r := &connReader{n: b.N, boot: time.Now()}
	res := newPodResolver()
	b.ReportAllocs()
	b.ResetTimer()
	s.Feed(context.Background(), r, Origin{Node: "n1", HostRouting: "bpf"}, res, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if st := s.Stats(); st.Added != uint64(4*b.N) {
		b.Fatalf("stored %d flows, want %d", st.Added, 4*b.N)
	}
}
