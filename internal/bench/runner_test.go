package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeEnv is an Environment that builds nothing and logs what is asked of it.
type fakeEnv struct {
	name     string
	setupErr error
	availErr error
	log      *[]string
}

func (e *fakeEnv) Name() string     { return e.name }
func (e *fakeEnv) Available() error { return e.availErr }
func (e *fakeEnv) Setup(context.Context) (Endpoints, error) {
	e.note("setup " + e.name)
	return Endpoints{Client: fakeHost{}, Server: fakeHost{}}, e.setupErr
}
func (e *fakeEnv) Teardown() error { e.note("teardown " + e.name); return nil }
func (e *fakeEnv) note(s string) {
	if e.log != nil {
		*e.log = append(*e.log, s)
	}
}

type fakeHost struct{}

func (fakeHost) Command(ctx context.Context, _ int, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "true")
}

// fakeWorkload needs no server and no tool; it logs each run and returns its count.
type fakeWorkload struct {
	log      *[]string
	cancelAt int // cancel the run's context at this run (0: never)
	cancel   context.CancelFunc
	runs     int
	counted  bool    // implements Counted
	counts   []int64 // Trial.Transactions of each run
}

func (w *fakeWorkload) Counted() bool { return w.counted }

func (w *fakeWorkload) Name() string     { return "fake" }
func (w *fakeWorkload) Describe() string { return "a fake workload" }
func (w *fakeWorkload) Metrics() []Metric {
	return []Metric{{Name: "rate", Unit: "1/s", HigherIsBetter: true}}
}
func (w *fakeWorkload) Run(ctx context.Context, t Trial) (Sample, error) {
	w.runs++
	w.counts = append(w.counts, t.Transactions)
	if w.log != nil {
		*w.log = append(*w.log, fmt.Sprintf("run %d", w.runs))
	}
	if w.runs == w.cancelAt {
		w.cancel()
		return nil, ctx.Err()
	}
	return Sample{"rate": float64(w.runs)}, nil
}

func TestRunInterleavesAndTearsDown(t *testing.T) {
	var log []string
	a, b := &fakeEnv{name: "a", log: &log}, &fakeEnv{name: "b", log: &log}
	w := &fakeWorkload{}
	cases := []Case{
		{Name: "a/1", Env: a, Workload: w, Placement: Unpinned},
		{Name: "b/1", Env: b, Workload: w, Placement: Unpinned, Baseline: "a/1"},
		{Name: "a/2", Env: a, Workload: w, Placement: Unpinned},
	}
	res, err := Run(context.Background(), Config{Cases: cases, Rounds: 2, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range res.Runs {
		order = append(order, fmt.Sprintf("%d:%s", r.Round, r.Case))
	}
	if want := []string{"1:a/1", "1:b/1", "1:a/2", "2:a/2", "2:b/1", "2:a/1"}; !reflect.DeepEqual(order, want) {
		t.Errorf("run order = %v, want %v (round 2 reversed)", order, want)
	}
	if want := []string{"setup a", "setup b", "teardown b", "teardown a"}; !reflect.DeepEqual(log, want) {
		t.Errorf("environment calls = %v, want each built once and torn down in reverse", log)
	}
	if len(res.Summaries) != 3 || res.Summaries[1].Ratio == nil {
		t.Errorf("summaries = %+v, want 3 with a ratio for b/1", res.Summaries)
	}
}

// TestRunCountsTransactions: a Counted case is calibrated by a short run by count before
// its first run, and every run goes by the last rate × the run length; other cases
// always by time.
func TestRunCountsTransactions(t *testing.T) {
	env := &fakeEnv{name: "a"}
	crr, rr := &fakeWorkload{counted: true}, &fakeWorkload{}
	cases := []Case{
		{Name: "a/crr", Env: env, Workload: crr, Placement: Unpinned},
		{Name: "a/rr", Env: env, Workload: rr, Placement: Unpinned},
	}
	res, err := Run(context.Background(), Config{Cases: cases, Rounds: 3, Duration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's rate is its run number: 1 for the calibration, then 2, 3, 4.
	if want := []int64{calibrationTransactions, 2, 3, 5}; !reflect.DeepEqual(crr.counts, want) {
		t.Errorf("counted case's transactions = %v, want %v (calibration, then ceil(last rate × 1.5 s))", crr.counts, want)
	}
	if want := []int64{0, 0, 0}; !reflect.DeepEqual(rr.counts, want) {
		t.Errorf("other case's transactions = %v, want %v", rr.counts, want)
	}
	if n := len(res.Runs); n != 6 {
		t.Errorf("%d runs recorded, want 6 (the calibration is not one)", n)
	}
}

func TestRunReportsUnavailable(t *testing.T) {
	var log []string
	ok := &fakeEnv{name: "ok", log: &log}
	broken := &fakeEnv{name: "broken", log: &log, setupErr: errors.New("no bridge")}
	missing := &fakeEnv{name: "flannel", log: &log, availErr: errors.New("needs flannel (scripts/build-flannel.sh)")}
	w := &fakeWorkload{}
	cases := []Case{
		{Name: "ok", Env: ok, Workload: w, Placement: Unpinned},
		{Name: "broken", Env: broken, Workload: w, Placement: Unpinned},
		{Name: "flannel", Env: missing, Workload: w, Placement: Unpinned},
		{Name: "cpu", Env: ok, Workload: w, Placement: Placement{Name: "far", Client: 0, Server: 4096}},
	}
	res, err := Run(context.Background(), Config{Cases: cases, Rounds: 1, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, c := range res.Cases {
		reasons[c.Name] = c.Unavailable
	}
	if reasons["ok"] != "" || !strings.Contains(reasons["broken"], "no bridge") ||
		!strings.Contains(reasons["flannel"], "needs flannel") || !strings.Contains(reasons["cpu"], "vCPU 4096") {
		t.Errorf("unavailable reasons = %q", reasons)
	}
	if want := []string{"setup ok", "setup broken", "teardown broken", "teardown ok"}; !reflect.DeepEqual(log, want) {
		t.Errorf("environment calls = %v, want %v (a failed setup is torn down too; unavailable ones are never built)", log, want)
	}
	if len(res.Runs) != 1 || res.Runs[0].Case != "ok" {
		t.Errorf("runs = %+v, want only ok", res.Runs)
	}
}

func TestRunTearsDownOnCancel(t *testing.T) {
	var log []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := &fakeEnv{name: "e", log: &log}
	w := &fakeWorkload{log: &log, cancelAt: 3, cancel: cancel}
	cases := []Case{{Name: "x", Env: env, Workload: w, Placement: Unpinned}, {Name: "y", Env: env, Workload: w, Placement: Unpinned}}
	res, err := Run(ctx, Config{Cases: cases, Rounds: 5, Duration: time.Second})
	if !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted {
		t.Fatalf("Run = %v, interrupted %v; want the results so far and context.Canceled", err, res != nil && res.Interrupted)
	}
	if want := []string{"setup e", "run 1", "run 2", "run 3", "teardown e"}; !reflect.DeepEqual(log, want) {
		t.Errorf("calls = %v, want %v", log, want)
	}
	if len(res.Runs) != 2 {
		t.Errorf("recorded %d runs, want the 2 that finished (the interrupted one is no figure)", len(res.Runs))
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	c := []Case{{Name: "x", Env: &fakeEnv{name: "e"}, Workload: &fakeWorkload{}}}
	if _, err := Run(context.Background(), Config{Cases: c, Rounds: 0, Duration: time.Second}); err == nil {
		t.Error("Run accepted 0 rounds")
	}
}

// fakeLabEnv holds a Cluster that is marked up already (no lab is built) and logs the
// cluster's holders after its Setup and Teardown.
type fakeLabEnv struct {
	fakeEnv
	cluster *Cluster
}

func (e *fakeLabEnv) labCluster() *Cluster { return e.cluster }
func (e *fakeLabEnv) Setup(ctx context.Context) (Endpoints, error) {
	err := e.cluster.acquire(ctx)
	e.note(fmt.Sprintf("setup %s holders=%d", e.name, e.cluster.refs))
	return Endpoints{Client: fakeHost{}, Server: fakeHost{}}, err
}
func (e *fakeLabEnv) Teardown() error {
	err := e.cluster.release()
	e.note(fmt.Sprintf("teardown %s holders=%d", e.name, e.cluster.refs))
	return err
}

// TestRunKeepsSharedLabUp: consecutive stages on one lab never leave it without a
// holder (it would come down and up again between them), and it is released at the end.
func TestRunKeepsSharedLabUp(t *testing.T) {
	var log []string
	cluster := &Cluster{tried: true} // "up" without a lab: acquire builds nothing
	a := &fakeLabEnv{fakeEnv{name: "a", log: &log}, cluster}
	b := &fakeLabEnv{fakeEnv{name: "b", log: &log}, cluster}
	w := &fakeWorkload{}
	cases := []Case{
		{Name: "a/1", Stage: "a", Env: a, Workload: w, Placement: Unpinned},
		{Name: "b/1", Stage: "b", Env: b, Workload: w, Placement: Unpinned},
		{Name: "c/1", Stage: "c", Env: &fakeEnv{name: "c", log: &log}, Workload: w, Placement: Unpinned},
	}
	if _, err := Run(context.Background(), Config{Cases: cases, Rounds: 1, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	want := []string{"setup a holders=2", "teardown a holders=1", "setup b holders=2", "teardown b holders=0", "setup c", "teardown c"}
	if !reflect.DeepEqual(log, want) {
		t.Errorf("lab holders = %v, want %v", log, want)
	}
}
