package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// keyWalk fakes BPF_MAP_GET_NEXT_KEY over a map of n keys: the first walks
// restart (the cursor key deleted) so they count past the capacity.
type keyWalk struct {
	n, restartingWalks int
	walks, pos         int
	err                error // returned instead of the 2nd key, when set
}

func (w *keyWalk) first() error {
	w.walks++
	w.pos = 0
	return w.step()
}

func (w *keyWalk) next() error {
	w.pos++
	if w.pos == 1 && w.err != nil {
		return w.err
	}
	if w.walks <= w.restartingWalks && w.pos == w.n-1 {
		w.pos = 0 // the cursor key was deleted: the kernel starts over
	}
	return w.step()
}

func (w *keyWalk) step() error {
	if w.pos >= w.n {
		return ebpf.ErrKeyNotExist
	}
	return nil
}

func TestCountKeys(t *testing.T) {
	eperm := errors.New("operation not permitted")
	for _, tc := range []struct {
		name      string
		walk      keyWalk
		capacity  int
		want      int
		wantErr   error
		wantWalks int
	}{
		{name: "empty", walk: keyWalk{n: 0}, capacity: 8, want: 0, wantWalks: 1},
		{name: "full", walk: keyWalk{n: 8}, capacity: 8, want: 8, wantWalks: 1},
		{name: "restarts, then a clean walk", walk: keyWalk{n: 8, restartingWalks: 2}, capacity: 8, want: 8, wantWalks: 3},
		{name: "restarts every time", walk: keyWalk{n: 8, restartingWalks: 9}, capacity: 8, want: 8,
			wantErr: ebpf.ErrIterationAborted, wantWalks: keyWalkAttempts},
		{name: "an error is not retried", walk: keyWalk{n: 8, err: eperm}, capacity: 8, want: 1, wantErr: eperm, wantWalks: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.walk
			n, err := countKeys(w.first, w.next, tc.capacity)
			if n != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("countKeys = %d, %v; want %d, %v", n, err, tc.want, tc.wantErr)
			}
			if w.walks != tc.wantWalks {
				t.Errorf("%d walks, want %d", w.walks, tc.wantWalks)
			}
		})
	}
}
