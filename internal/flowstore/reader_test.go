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

// fakeReader returns its records, one error per bad entry, then io.EOF.
type fakeReader struct {
	recs []any // datapath.FlowRecord or error
}

func (r *fakeReader) Read() (datapath.FlowRecord, error) {
	if len(r.recs) == 0 {
		return datapath.FlowRecord{}, io.EOF
	}
	next := r.recs[0]
	r.recs = r.recs[1:]
	if err, ok := next.(error); ok {
		return datapath.FlowRecord{}, err
	}
	return next.(datapath.FlowRecord), nil
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

func TestFeed(t *testing.T) {
	s := New(10)
	r := &fakeReader{recs: []any{
		datapath.FlowRecord{Kind: datapath.FlowTCP, Proto: 6, TCPFlags: 0x02},
		fmt.Errorf("%w: unknown kind 9", datapath.ErrFlowRecord), // skipped, not the end
		datapath.FlowRecord{Kind: datapath.FlowDrop, Proto: 6, Reason: "DROP_POLICY_DENIED"},
	}}
	s.Feed(context.Background(), r, Origin{Node: "n1"}, verdicter{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var types []flow.Type
	for _, f := range collect(t, s, flow.Request{}) {
		types = append(types, f.Type)
	}
	want := []flow.Type{flow.TypeL3L4, flow.TypeDrop, flow.TypePolicyVerdict}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("stored %v, want %v", types, want)
	}
}
