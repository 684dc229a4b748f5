package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/testenv"
)

// fakeAdopter has left endpoints to adopt; each retry fails while fails > 0.
type fakeAdopter struct {
	mu      sync.Mutex
	left    int
	fails   int
	retries int
}

func (f *fakeAdopter) Unadopted() int { f.mu.Lock(); defer f.mu.Unlock(); return f.left }

func (f *fakeAdopter) RetryAdoption() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retries++
	if f.fails > 0 {
		f.fails--
		return f.left, errors.New("fake: attach failed")
	}
	f.left = 0
	return 0, nil
}

func (f *fakeAdopter) tried() int { f.mu.Lock(); defer f.mu.Unlock(); return f.retries }

// The loop retries while endpoints are left, reports each try as endpoint-restore
// (failing, then repaired), and calls nothing once none is left.
func TestAdoptionLoopRetriesUntilAdopted(t *testing.T) {
	l := newLoops()
	eps := &fakeAdopter{left: 1, fails: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		adoptionLoop{eps: eps, interval: time.Millisecond, loops: l, log: slog.New(slog.DiscardHandler)}.Run(ctx)
		close(done)
	}()
	testenv.WaitFor(t, "the endpoint adopted on the third try", func() bool { return eps.Unadopted() == 0 })
	tries := eps.tried()
	time.Sleep(20 * time.Millisecond) // many ticks with nothing left
	cancel()
	<-done
	if tries != 3 || eps.tried() != 3 {
		t.Errorf("retries: %d when adopted, %d after; want 3 and no more once none is left", tries, eps.tried())
	}
	for _, c := range l.controllers() {
		if c.Name == "endpoint-restore" && (c.Runs != 3 || c.Errors != 2 || c.Failing) {
			t.Errorf("endpoint-restore: %+v, want 3 runs, 2 errors, not failing after the adoption", c)
		}
	}
}
