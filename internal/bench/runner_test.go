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
}

func (w *fakeWorkload) Name() string     { return "fake" }
func (w *fakeWorkload) Describe() string { return "a fake workload" }
func (w *fakeWorkload) Metrics() []Metric {
	return []Metric{{Name: "rate", Unit: "1/s", HigherIsBetter: true}}
}
func (w *fakeWorkload) Run(ctx context.Context, t Trial) (Sample, error) {
	w.runs++
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
