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
// records at each poll under a TCP_CRR load), few enough that other adders (a LOST
// flow) wait little while a batch is converted into the store's slots.
const feedBatch = 128

// PolicyVerdicter is a Resolver that also knows NetworkPolicy: PolicyVerdict writes
// the POLICY_VERDICT record that goes with r to pv (all of it: pv holds an older
// record) and returns true, or returns false.
type PolicyVerdicter interface {
	PolicyVerdict(r, pv *flow.Record) bool
}

// Feed reads records from r, converts them and adds them to s, as flows observed at
// o, until ctx ends or r fails. It closes r.
func (s *Store) Feed(ctx context.Context, r RecordReader, o Origin, res Resolver, log *slog.Logger) {
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	s.mu.Lock()
	s.origin = o
	s.mu.Unlock()
	recs := make([]datapath.FlowRecord, feedBatch)
	var verdict flow.Record // a record's POLICY_VERDICT, until it has a slot
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
		// Convert straight into the store's slots (reserve), a verdict after its
		// record; at the end of the ring the rest go into the next slots from its start.
		pending := false
		for i := 0; i < n || pending; {
			dst := s.reserve(n - i + 1)
			used := 0
			for used < len(dst) && (i < n || pending) {
				if pending {
					dst[used], pending = verdict, false
					used++
					continue
				}
				rec := &dst[used]
				recordInto(rec, &recs[i], res)
				used, i = used+1, i+1
				pending = verdicter != nil && verdicter.PolicyVerdict(rec, &verdict)
			}
			s.commit(used)
		}
	}
}
