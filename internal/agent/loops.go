package agent

import (
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// loops tracks the last run and last error of each control loop for status.
type loops struct {
	mu    sync.Mutex
	state map[string]*api.LoopStatus
	order []string
}

func newLoops() *loops { return &loops{state: map[string]*api.LoopStatus{}} }

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
	}
	s.LastRun = time.Now()
	if err != nil {
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
