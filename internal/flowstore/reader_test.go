package flowstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

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

func (verdicter) PolicyVerdict(f, pv *flow.Flow) bool {
	if f.Type != flow.TypeDrop {
		return false
	}
	*pv = *f
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
