package flowstore

import (
	"context"
	"errors"
	"log/slog"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
)

// RecordReader reads datapath flow records (datapath.FlowReader).
type RecordReader interface {
	// ReadBatch blocks until a record is there, then fills recs with it and the
	// records already waiting behind it, and returns how many it filled. A record it
	// cannot decode comes back alone as an error wrapping datapath.ErrFlowRecord.
	ReadBatch(recs []datapath.FlowRecord) (int, error)
	Close() error
}

// feedBatch is how many records Feed takes from the ring at a time: enough that the
// store's and the metrics' locks cost nothing per record (the agent drains ~10,000
// records at each poll under a TCP_CRR load), few enough that the batch's flows
// (2 × feedBatch × ~400 bytes, room for a policy verdict per record) stay small.
const feedBatch = 128

// PolicyVerdicter is a Resolver that also knows NetworkPolicy: PolicyVerdict writes
// the POLICY_VERDICT flow that goes with f to pv (all of it: pv holds an older flow)
// and returns true, or returns false.
type PolicyVerdicter interface {
	PolicyVerdict(f, pv *flow.Flow) bool
}

// Feed reads records from r, converts them and adds them to s until ctx ends or r
// fails. It closes r.
func (s *Store) Feed(ctx context.Context, r RecordReader, o Origin, res Resolver, log *slog.Logger) {
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	var names addrNames
	recs := make([]datapath.FlowRecord, feedBatch)
	batch := make([]flow.Flow, 0, 2*feedBatch) // reused: AddBatch keeps copies
	verdicter, _ := res.(PolicyVerdicter)
	for {
		n, err := r.ReadBatch(recs)
		if errors.Is(err, datapath.ErrFlowRecord) {
			log.Warn("skip a flow record", "err", err)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Error("read datapath flows", "err", err)
			}
			return
		}
		batch = batch[:0]
		for i := range recs[:n] {
			batch = batch[:len(batch)+1] // convertInto overwrites the whole Flow
			f := &batch[len(batch)-1]
			convertInto(f, recs[i], o, res, &names)
			if verdicter == nil {
				continue
			}
			batch = batch[:len(batch)+1] // within its capacity: f stays valid
			if !verdicter.PolicyVerdict(f, &batch[len(batch)-1]) {
				batch = batch[:len(batch)-1]
			}
		}
		s.AddBatch(batch)
	}
}
