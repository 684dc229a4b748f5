package flowstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
)

// fakeReader returns its records in batches of up to two (as many as fit before the
// next error), one error per bad entry, then io.EOF.
type fakeReader struct {
	recs []any // datapath.FlowRecord or error
}

func (r *fakeReader) ReadBatch(recs []datapath.FlowRecord) (int, error) {
	if len(r.recs) == 0 {
		return 0, io.EOF
	}
	if err, ok := r.recs[0].(error); ok {
		r.recs = r.recs[1:]
		return 0, err
	}
	n := 0
	for n < min(2, len(recs)) && len(r.recs) > 0 {
		rec, ok := r.recs[0].(datapath.FlowRecord)
		if !ok {
			break
		}
		recs[n] = rec
		r.recs = r.recs[1:]
		n++
	}
	return n, nil
}

func (r *fakeReader) Close() error { return nil }

// verdicter adds a policy verdict to every drop.
type verdicter struct{ fakeResolver }

func (verdicter) PolicyVerdict(r, pv *flow.Record) bool {
	if r.Type != flow.TypeDrop {
		return false
	}
	*pv = *r
	pv.Type = flow.TypePolicyVerdict
	return true
}

// TestFeed: records in batches, a bad record skipped, a policy verdict stored after
// the drop it goes with, and each flow whole in the reused batch (nothing left over
// from the flow its slot held before).
func TestFeed(t *testing.T) {
	s := New(10)
	r := &fakeReader{recs: []any{
		datapath.FlowRecord{Kind: datapath.FlowTCP, Proto: 6, TCPFlags: 0x02, DstPort: 80},
		fmt.Errorf("%w: unknown kind 9", datapath.ErrFlowRecord), // skipped, not the end
		datapath.FlowRecord{Kind: datapath.FlowDrop, Proto: 6, Reason: "DROP_POLICY_DENIED"},
		datapath.FlowRecord{Kind: datapath.FlowNew, Proto: 17, SrcPort: 7},  // a batch with the drop
		datapath.FlowRecord{Kind: datapath.FlowNew, Proto: 17, DstPort: 53}, // in the drop's slot
	}}
	s.Feed(context.Background(), r, Origin{Node: "n1"}, verdicter{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var got []string
	for _, f := range collect(t, s, flow.Request{}) {
		got = append(got, fmt.Sprintf("%s/%s/%s/%d/%d", f.Type, f.Protocol, f.DropReason, f.SrcPort, f.DstPort))
	}
	want := []string{"L3_L4/TCP//0/80", "DROP/TCP/DROP_POLICY_DENIED/0/0", "POLICY_VERDICT/TCP/DROP_POLICY_DENIED/0/0",
		"L3_L4/UDP//7/0", "L3_L4/UDP//0/53"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored %v, want %v", got, want)
	}
}

// TestFeedAcrossTheRingsEnd: Feed converts into the store's slots; a drop in the
// ring's last slot has its verdict in the first slot, the ring keeps the newest flows
// in order, and the counts add up.
func TestFeedAcrossTheRingsEnd(t *testing.T) {
	s := New(5)
	syn := func(port uint16) datapath.FlowRecord {
		return datapath.FlowRecord{Kind: datapath.FlowTCP, Proto: 6, TCPFlags: 0x02, SrcPort: port}
	}
	drop := datapath.FlowRecord{Kind: datapath.FlowDrop, Proto: 17, Reason: "DROP_POLICY_DENIED", SrcPort: 5}
	// Batches of two (fakeReader): slots 0-1, 2-3, then the drop alone (a bad record
	// ends its batch) in slot 4, its verdict in slot 0 and the last SYN in slot 1.
	bad := fmt.Errorf("%w: unknown kind 9", datapath.ErrFlowRecord)
	recs := []any{syn(1), syn(2), syn(3), syn(4), drop, bad, syn(6)}
	s.Feed(context.Background(), &fakeReader{recs: recs}, Origin{Node: "n1"}, verdicter{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var got []string
	for _, f := range collect(t, s, flow.Request{}) {
		got = append(got, fmt.Sprintf("%s/%s/%d", f.Type, f.Protocol, f.SrcPort))
	}
	want := []string{"L3_L4/TCP/3", "L3_L4/TCP/4", "DROP/UDP/5", "POLICY_VERDICT/UDP/5", "L3_L4/TCP/6"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored %v, want %v", got, want)
	}
	if st := s.Stats(); st.Stored != 5 || st.Added != 7 {
		t.Errorf("stats %+v, want 5 stored of 7 added", st)
	}
}

// TestFeedReadsBackAsConverted: what Feed stores compactly reads back, from the
// history and to a follower, as the Flow Convert makes of the same datapath record:
// pods resolved, node and host routing added, a Service named, a DNS message parsed.
func TestFeedReadsBackAsConverted(t *testing.T) {
	now := time.Unix(100, 5)
	client, backend := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7")
	recs := []datapath.FlowRecord{
		{Time: now, Kind: datapath.FlowTCP, Direction: "from-pod", Src: client, Dst: backend, Proto: 6, SrcPort: 40000, DstPort: 8080,
			TCPFlags: 0x02, Service: netip.MustParseAddrPort("10.96.0.20:80")},
		{Time: now, Kind: datapath.FlowTCP, Direction: "to-pod", Src: backend, Dst: client, Proto: 6, SrcPort: 8080, DstPort: 40000, TCPFlags: 0x12},
		{Time: now, Kind: datapath.FlowDrop, Reason: "DROP_POLICY_DENIED", Direction: "to-pod", Src: client, Dst: backend, Proto: 17, SrcPort: 5, DstPort: 6},
		{Time: now, Kind: datapath.FlowNew, Direction: "from-pod", Src: client, Dst: backend, Proto: 1, SrcPort: 8 << 8},
		{Time: now, Kind: datapath.FlowSummary, Direction: "from-pod", Src: client, Dst: backend, Proto: 17, Packets: 9, Bytes: 900},
		{Time: now, Kind: datapath.FlowDNS, Direction: "from-pod", Src: client, Dst: backend, Proto: 17, DstPort: 53, Payload: dnsQuery(t)},
		{Time: now, Kind: datapath.FlowDrop, Reason: "DROP_INVALID_SOURCE", Direction: "from-pod"}, // no addresses read
	}
	o := Origin{Node: "n1", HostRouting: "bpf"}
	s := New(100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followed := make(chan *flow.Flow, 100)
	go s.Flows(ctx, flow.Request{Follow: true}, followed) //nolint:errcheck // ends with ctx
	for s.Stats().Followers == 0 {
		time.Sleep(time.Millisecond)
	}
	in := make([]any, len(recs))
	for i := range recs {
		in[i] = recs[i]
	}
	s.Feed(context.Background(), &fakeReader{recs: in}, o, fakeResolver{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stored := collect(t, s, flow.Request{})
	if len(stored) != len(recs) {
		t.Fatalf("%d flows stored, want %d", len(stored), len(recs))
	}
	for i, rec := range recs {
		want := Convert(rec, o, fakeResolver{})
		if !reflect.DeepEqual(stored[i], want) {
			t.Errorf("record %d from the history:\n got %+v\nwant %+v", i, stored[i], want)
		}
		if got := <-followed; !reflect.DeepEqual(got, want) {
			t.Errorf("record %d to a follower:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if f := stored[0]; f.Source.Pod != "client" || f.Service != "y/web" || f.Node != "n1" || f.HostRouting != "bpf" || !f.Time.Equal(now) {
		t.Errorf("first flow %+v: want the client pod, Service y/web, node n1, bpf, time %v", f, now)
	}
	if f := stored[5]; f.Type != flow.TypeDNS || f.DNS == nil || f.DNS.Query != "web.y.svc.cluster.local." {
		t.Errorf("DNS flow %+v: want its query parsed", f)
	}
	if f := stored[6]; f.Source.IP != "" || f.Destination.IP != "" {
		t.Errorf("drop without addresses: %+v, want no endpoints", f)
	}
}
