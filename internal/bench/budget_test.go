package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// listWorkload returns its values in turn, one per run (the last one repeated).
type listWorkload struct {
	vals []float64
	runs int
}

func (w *listWorkload) Name() string     { return "list" }
func (w *listWorkload) Describe() string { return "fake figures" }
func (w *listWorkload) Metrics() []Metric {
	return []Metric{{Name: "rate", Unit: "1/s", HigherIsBetter: true}}
}
func (w *listWorkload) Run(context.Context, Trial) (Sample, error) {
	v := w.vals[min(w.runs, len(w.vals)-1)]
	w.runs++
	return Sample{"rate": v}, nil
}

func fixedStage(name string, setup, perRound time.Duration) StagePlan {
	return StagePlan{Name: name, Setup: setup, Round: func(d time.Duration) time.Duration {
		return perRound + 10*d // ten cases of d each
	}}
}

func TestPlanBudgetPicksMostRoundsThenLongestRuns(t *testing.T) {
	stages := []StagePlan{fixedStage("a", time.Minute, 10*time.Second), fixedStage("b", 2*time.Minute, 20*time.Second)}
	for _, tc := range []struct {
		budget     time.Duration
		fixed      time.Duration
		wantRounds int
		wantDur    time.Duration
		wantFits   bool
	}{
		// 3 rounds of 3 s: 3m setup + 3×(30 s + 60 s) = 7m30s, within 4/5 of 10m.
		{budget: 10 * time.Minute, wantRounds: 3, wantDur: 3 * time.Second, wantFits: true},
		// 8m: 4/5 is 6m24s; 3 rounds of 2 s: 3m + 3×70 s = 6m30s no; of 1 s: 3m + 3×50 s = 5m30s.
		{budget: 8 * time.Minute, wantRounds: 3, wantDur: time.Second, wantFits: true},
		// 5m: 4/5 is 4m; 3 rounds of 1 s = 5m30s no; 2 rounds of 3 s: 3m + 2×90 s = 6m no; of 1 s: 3m + 100 s no;
		// 1 round of 3 s = 4m30s no; of 1 s = 3m50s yes.
		{budget: 5 * time.Minute, wantRounds: 1, wantDur: time.Second, wantFits: true},
		// Nothing fits: 1 round of the shortest run, over budget.
		{budget: time.Minute, wantRounds: 1, wantDur: time.Second, wantFits: false},
		// A fixed run length is kept.
		{budget: 10 * time.Minute, fixed: 5 * time.Second, wantRounds: 2, wantDur: 5 * time.Second, wantFits: true},
	} {
		p := PlanBudget(stages, tc.budget, 3, tc.fixed)
		if p.MinRounds != tc.wantRounds || p.Duration != tc.wantDur || p.Fits != tc.wantFits {
			t.Errorf("PlanBudget(%s, fixed %s) = %d rounds of %s, fits %v (estimate %s); want %d of %s, fits %v",
				tc.budget, tc.fixed, p.MinRounds, p.Duration, p.Fits, p.Estimate, tc.wantRounds, tc.wantDur, tc.wantFits)
		}
	}
}

func TestStageDeadlineSharesSlackByCost(t *testing.T) {
	now := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	// 30 minutes left, this stage needs 5, the later ones 10: 15 of slack, a third is ours.
	got := StageDeadline(now, now.Add(30*time.Minute), 5*time.Minute, 10*time.Minute)
	if want := now.Add(10 * time.Minute); !got.Equal(want) {
		t.Errorf("deadline = %s, want %s", got, want)
	}
	// Over budget: no slack, the stage gets its minimum.
	got = StageDeadline(now, now.Add(5*time.Minute), 5*time.Minute, 10*time.Minute)
	if want := now.Add(5 * time.Minute); !got.Equal(want) {
		t.Errorf("deadline over budget = %s, want %s", got, want)
	}
}

func TestRelSpread(t *testing.T) {
	if s := RelSpread([]float64{90, 100, 110}); math.Abs(s-0.2) > 1e-9 {
		t.Errorf("RelSpread(90,100,110) = %v, want 0.2", s)
	}
	if s := RelSpread([]float64{5}); !math.IsInf(s, 1) {
		t.Errorf("RelSpread of one value = %v, want +Inf (unknown)", s)
	}
	if s := RelSpread([]float64{0, 0}); s != 0 {
		t.Errorf("RelSpread(0,0) = %v, want 0", s)
	}
}

func runsOf(name string, vals ...float64) []RunRecord {
	var out []RunRecord
	for i, v := range vals {
		out = append(out, RunRecord{Round: i + 1, Case: name, Seconds: 2, Values: Sample{"rate": v}})
	}
	return out
}

func TestWideCasesTakesSpreadRatiosWithBaselines(t *testing.T) {
	w := &listWorkload{}
	cases := []Case{
		{Name: "base", Workload: w}, {Name: "steady", Workload: w, Baseline: "base"},
		{Name: "noisy", Workload: w, Baseline: "base"}, {Name: "alone", Workload: w}, {Name: "done", Workload: w},
	}
	var runs []RunRecord
	runs = append(runs, runsOf("base", 100, 110, 90)...)
	runs = append(runs, runsOf("steady", 50, 55, 45)...) // ratio 0.5 every round, though the figure moves 20%
	runs = append(runs, runsOf("noisy", 50, 70, 45)...)
	runs = append(runs, runsOf("alone", 10, 10.1, 9.95)...) // 1.5% spread
	runs = append(runs, runsOf("done", 1, 2, 3, 4, 5)...)   // wide, but at the most rounds
	got := WideCases(cases, runs, 0.03, 5)
	if want := []string{"base", "noisy"}; !equalStrings(got, want) {
		t.Errorf("WideCases = %v, want %v (the noisy ratio and its baseline)", got, want)
	}
}

func TestRoundCostUsesMeasuredRuns(t *testing.T) {
	runs := append(runsOf("a", 1, 1), RunRecord{Round: 1, Case: "b", Seconds: 6})
	if got := roundCost([]string{"a", "b", "c"}, runs, 3*time.Second); got != 11*time.Second {
		t.Errorf("roundCost = %s, want 2 s + 6 s + 3 s (fallback)", got)
	}
}

// TestRunWithBudgetGivesExtraRoundsToWideCases runs fake cases with a generous budget:
// every case gets the first rounds, only the noisy one (and its baseline) gets more,
// and the results record the plan.
func TestRunWithBudgetGivesExtraRoundsToWideCases(t *testing.T) {
	env := &fakeEnv{name: "e"}
	cases := []Case{
		{Name: "base", Env: env, Workload: &listWorkload{vals: []float64{100}}, Placement: Unpinned},
		{Name: "steady", Env: env, Workload: &listWorkload{vals: []float64{50}}, Placement: Unpinned, Baseline: "base"},
		{Name: "noisy", Env: env, Workload: &listWorkload{vals: []float64{50, 70, 40, 60}}, Placement: Unpinned, Baseline: "base"},
	}
	res, err := Run(context.Background(), Config{Cases: cases, Rounds: 6, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rounds := map[string]int{}
	for _, r := range res.Runs {
		rounds[r.Case]++
	}
	if rounds["steady"] != BudgetMinRounds || rounds["noisy"] != 6 || rounds["base"] != 6 {
		t.Errorf("rounds = %v, want steady %d, noisy and base 6", rounds, BudgetMinRounds)
	}
	if res.Budget == nil || res.Budget.MinRounds != BudgetMinRounds || res.DurationSeconds != 3 {
		t.Errorf("budget info = %+v, run length %gs; want %d first rounds of 3 s", res.Budget, res.DurationSeconds, BudgetMinRounds)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestQuickCoversEveryStage checks that --quick runs a case of every stage, the Service
// stages being stood for by svc-myelin-10 (they differ in proxy and count only).
func TestQuickCoversEveryStage(t *testing.T) {
	all := Catalog("x")
	quick, err := Select(all, QuickCases)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, c := range quick {
		have[c.Stage] = true
	}
	for _, c := range all {
		if _, svc := c.Env.(*ServiceScale); svc && c.Stage != "svc-myelin-10" {
			continue
		}
		if !have[c.Stage] {
			t.Errorf("--quick runs no case of stage %q", c.Stage)
		}
	}
	if len(quick) > 2*len(QuickCases) {
		t.Errorf("--quick runs %d cases, want one per pattern and its baseline", len(quick))
	}
}

// TestStagePlansGrowServiceLab: the stages of one proxy's Service lab, in growing counts,
// plan one lab bring-up and each stage's new Services only; another lab starts over.
func TestStagePlansGrowServiceLab(t *testing.T) {
	cases := ServiceScaleCases([]int{10, 1000})
	all := stages(cases)
	plans := StagePlans(all, func(Case) bool { return true })
	if len(plans) != 6 {
		t.Fatalf("%d stage plans, want 6 (3 proxies × 2 counts)", len(plans))
	}
	pads := 4 * calibrationRun // 2 placements × (svc-crr, direct-crr), each calibrated once
	for i, want := range []time.Duration{
		labSetupEstimate + fillerCost(0, 10) + pads,                       // svc-myelin-10: a new lab
		fillerCost(10, 1000) + pads,                                       // svc-myelin-1000: grown in place
		labSetupEstimate + fillerCost(0, 10) + pads + 90*time.Millisecond, // svc-iptables-10: its own lab, kube-proxy 9 ms per Service
		fillerCost(10, 1000) + pads + 8910*time.Millisecond,               // svc-iptables-1000: grown in place
	} {
		if plans[i].Setup != want {
			t.Errorf("stage %s setup = %s, want %s", plans[i].Name, plans[i].Setup, want)
		}
	}
	if got := fillerCost(0, 6000); got < 60*time.Second || got > 76*time.Second {
		t.Errorf("fillerCost(0, 6000) = %s, want about the 68 s measured", got)
	}
	if got := fillerCost(1000, 10000); got < 160*time.Second || got > 190*time.Second {
		t.Errorf("fillerCost(1000, 10000) = %s, want about the 176 s measured", got)
	}
}

// Run's flags are checked, each refusal naming its flag; a negative budget is no
// unbounded run.
func TestCheckRunFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Rounds: 5, Duration: 3 * time.Second}, ""},
		{Config{Rounds: 5, Budget: 30 * time.Minute}, ""},
		{Config{Rounds: 0, Duration: time.Second}, "--rounds 0"},
		{Config{Rounds: 5, Duration: 3 * time.Second, Budget: -time.Minute}, "--budget -1m0s"},
		{Config{Rounds: 5, Duration: time.Hour}, "--duration 1h0m0s"},
		{Config{Rounds: 5}, "--duration 0 without --budget"},
	} {
		err := checkRunFlags(tc.cfg)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkRunFlags(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
