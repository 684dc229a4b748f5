package agent

import (
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/metrics"
)

// loops tracks the last run and last error of each control loop for status.
type loops struct {
	mu    sync.Mutex
	state map[string]*api.LoopStatus
	order []string
	// counts are each loop's runs and errors since start, for metrics.
	counts map[string]*loopCounts
}

// loopCounts counts one loop's runs and the runs that ended in an error.
type loopCounts struct{ runs, errors uint64 }

func newLoops() *loops {
	return &loops{state: map[string]*api.LoopStatus{}, counts: map[string]*loopCounts{}}
}

// report records one run of a loop; a nil error keeps the last error visible (with
// its time) so an operator can see what went wrong even after recovery.
func (l *loops) report(name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.state[name]
	if !ok {
		s = &api.LoopStatus{Name: name}
		l.state[name] = s
		l.order = append(l.order, name)
		l.counts[name] = &loopCounts{}
	}
	s.LastRun = time.Now()
	l.counts[name].runs++
	if err != nil {
		l.counts[name].errors++
		s.LastError, s.ErrorTime = err.Error(), s.LastRun
	}
}

func (l *loops) snapshot() []api.LoopStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]api.LoopStatus, 0, len(l.order))
	for _, n := range l.order {
		out = append(out, *l.state[n])
	}
	return out
}

// controllers is every loop's runs and errors, for metrics.
func (l *loops) controllers() []metrics.Controller {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]metrics.Controller, 0, len(l.order))
	for _, n := range l.order {
		st, c := l.state[n], l.counts[n]
		out = append(out, metrics.Controller{Name: n, Runs: c.runs, Errors: c.errors,
			Failing: st.LastError != "" && st.ErrorTime.Equal(st.LastRun)})
	}
	return out
}
