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
	Read() (datapath.FlowRecord, error)
	Close() error
}

// PolicyVerdicter is a Resolver that also knows NetworkPolicy: PolicyVerdict writes
// the POLICY_VERDICT flow that goes with f to pv and returns true, or returns false.
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
	var f, pv flow.Flow // reused: Add keeps a copy
	verdicter, _ := res.(PolicyVerdicter)
	for {
		rec, err := r.Read()
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
		convertInto(&f, rec, o, res, &names)
		s.Add(&f)
		if verdicter != nil && verdicter.PolicyVerdict(&f, &pv) {
			s.Add(&pv)
		}
	}
}
