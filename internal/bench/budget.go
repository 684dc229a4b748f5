package bench

import (
	"fmt"
	"math"
	"time"
)

// Budgeted runs (--budget): the bench plans the time of the selected cases (environment
// setup per stage, rounds × run length × cases), runs the first rounds of every case
// interleaved, then spends what the budget has left on extra rounds for the cases whose
// figures spread widest, stopping each case once its spread is within the target.
const (
	// BudgetMinRounds is the number of rounds every case gets before the budget decides,
	// when the budget allows it (a spread needs more than one round).
	BudgetMinRounds = 3
	// BudgetTargetSpread is the relative spread ((max-min)/median of a case's ratio to its
	// baseline, or of its headline figure without one) at which a case needs no more rounds.
	BudgetTargetSpread = 0.03
)

// Run-cost estimates for planning; the runner measures the real cost as it goes.
const (
	runOverhead      = 200 * time.Millisecond // netperf/iperf3 start and stop around a run
	calibrationRun   = time.Second            // a Counted case's calibration run (runner.go, transactions)
	controlPlaneRun  = 45 * time.Second       // one round of a control-plane workload
	labSetupEstimate = 25 * time.Second       // lab down of the last stage and lab up of this one
	netnsSetup       = 2 * time.Second        // the no-lab baselines
)

// calibrationTransactions is the length of the run that gives a Counted case's rate before
// its first recorded run: 0.1 s at 10,000 connections/s, 1 s at the slowest lab paths'
// 1,000.
const calibrationTransactions = 1000

// fillerCost's coefficients, in seconds per Service and per Service squared, and
// what kube-proxy adds per Service to program them (its lab's setup beyond myelin's
// for 9,000 Services in the make bench run of 2026-11-29: 80 s iptables, 126 s
// nftables).
const (
	fillerLinear    = 2e-3
	fillerQuadratic = 1.6e-6
	kubeProxyCost   = 9e-3
	kubeProxyNFCost = 14e-3
)

// budgetDurations are the run lengths a budget may choose, longest first.
var budgetDurations = []time.Duration{3 * time.Second, 2 * time.Second, time.Second}

// A StagePlan is the estimated cost of one stage: its setup and one round of its cases
// at each run length.
type StagePlan struct {
	Name  string
	Cases int
	Setup time.Duration
	// Round returns the estimated cost of one round of every case with runs of d.
	Round func(d time.Duration) time.Duration
}

// Min is the stage's cost with the given rounds of runs of d.
func (s StagePlan) Min(rounds int, d time.Duration) time.Duration {
	return s.Setup + time.Duration(rounds)*s.Round(d)
}

// A Plan is what a budget affords: the run length, the rounds every case gets first, and
// the estimated cost of those.
type Plan struct {
	Budget    time.Duration
	Duration  time.Duration
	MinRounds int
	Estimate  time.Duration // of MinRounds rounds of every case, setups included
	Fits      bool          // Estimate is within Budget
}

// PlanBudget picks the most rounds (up to minRounds) and then the longest run (up to
// maxDuration; fixed when fixedDuration) whose estimated cost fits the budget with a
// fifth left for extra rounds. When nothing fits it takes 1 round of the shortest run:
// every case still runs once, the plan says it is over budget.
func PlanBudget(stages []StagePlan, budget time.Duration, minRounds int, fixedDuration time.Duration) Plan {
	durations := budgetDurations
	if fixedDuration > 0 {
		durations = []time.Duration{fixedDuration}
	}
	total := func(rounds int, d time.Duration) time.Duration {
		var t time.Duration
		for _, s := range stages {
			t += s.Min(rounds, d)
		}
		return t
	}
	for rounds := max(minRounds, 1); rounds >= 1; rounds-- {
		for _, d := range durations {
			if est := total(rounds, d); est <= budget*4/5 {
				return Plan{Budget: budget, Duration: d, MinRounds: rounds, Estimate: est, Fits: true}
			}
		}
	}
	d := durations[len(durations)-1]
	est := total(1, d)
	return Plan{Budget: budget, Duration: d, MinRounds: 1, Estimate: est, Fits: est <= budget}
}

// String says the plan in one line for the log and the report.
func (p Plan) String() string {
	s := fmt.Sprintf("budget %s: %d rounds of %s runs for every case first (estimated %s), then extra rounds "+
		"for the widest spreads while the budget lasts", p.Budget, p.MinRounds, p.Duration, p.Estimate.Round(time.Second))
	if !p.Fits {
		s += "; the estimate is over the budget, so the run may take longer than it"
	}
	return s
}

// StageDeadline is when a stage starting at now should stop adding rounds: its own
// minimum cost plus its share (by minimum cost) of the slack the budget has beyond the
// minimum of this and the later stages.
func StageDeadline(now, end time.Time, thisMin, laterMin time.Duration) time.Time {
	slack := end.Sub(now) - thisMin - laterMin
	if slack <= 0 || thisMin+laterMin <= 0 {
		return now.Add(thisMin)
	}
	share := time.Duration(float64(slack) * float64(thisMin) / float64(thisMin+laterMin))
	return now.Add(thisMin + share)
}

// RelSpread is (max-min)/|median| of xs; +Inf for fewer than 2 values or a zero median
// (a case with one round has no known spread).
func RelSpread(xs []float64) float64 {
	if len(xs) < 2 {
		return math.Inf(1)
	}
	m := Median(xs)
	if m == 0 {
		if minOf(xs) == maxOf(xs) {
			return 0
		}
		return math.Inf(1)
	}
	return (maxOf(xs) - minOf(xs)) / math.Abs(m)
}

// caseSpread is the spread a budget judges a case by: its headline metric's per-round
// ratio to its baseline, or the headline figure itself without a baseline.
func caseSpread(c Case, byRound map[string]map[int]Sample) float64 {
	metric := c.Workload.Metrics()[0].Name
	if c.Baseline != "" {
		return RelSpread(roundRatios(byRound[c.Name], byRound[c.Baseline], metric))
	}
	return RelSpread(metricValues(byRound[c.Name], metric))
}

// WideCases are the cases (in their order) that need another round: their spread is over
// target and they have had fewer than maxRounds rounds, with the baselines they are
// compared to (a ratio needs both in the same round).
func WideCases(cases []Case, runs []RunRecord, target float64, maxRounds int) []string {
	byRound := roundsOf(runs)
	want := map[string]bool{}
	for _, c := range cases {
		if len(byRound[c.Name]) < maxRounds && caseSpread(c, byRound) > target {
			want[c.Name] = true
			if c.Baseline != "" {
				want[c.Baseline] = true
			}
		}
	}
	var out []string
	for _, c := range cases {
		if want[c.Name] {
			out = append(out, c.Name)
		}
	}
	return out
}

// roundsOf indexes the successful runs: case -> round -> figures.
func roundsOf(runs []RunRecord) map[string]map[int]Sample {
	out := map[string]map[int]Sample{}
	for _, r := range runs {
		if r.Error != "" || r.Values == nil {
			continue
		}
		if out[r.Case] == nil {
			out[r.Case] = map[int]Sample{}
		}
		out[r.Case][r.Round] = r.Values
	}
	return out
}

// roundCost estimates one round of names from the runs so far: the mean measured
// seconds of each case's runs (fallback when a case has none).
func roundCost(names []string, runs []RunRecord, fallback time.Duration) time.Duration {
	sum, n := map[string]float64{}, map[string]int{}
	for _, r := range runs {
		sum[r.Case] += r.Seconds
		n[r.Case]++
	}
	var total time.Duration
	for _, name := range names {
		if n[name] == 0 {
			total += fallback
			continue
		}
		total += time.Duration(sum[name] / float64(n[name]) * float64(time.Second))
	}
	return total
}
