package bench

import (
	"context"
	"fmt"
	"time"
)

// BudgetInfo is how a budgeted run was planned, as written to results.json.
type BudgetInfo struct {
	BudgetSeconds   float64 `json:"budgetSeconds"`
	EstimateSeconds float64 `json:"estimateSeconds"`
	MinRounds       int     `json:"minRounds"`
	MaxRounds       int     `json:"maxRounds"`
	TargetSpread    float64 `json:"targetSpread"`
	Plan            string  `json:"plan"`
}

// StagePlans estimates each stage's cost from its available cases.
func StagePlans(all [][]Case, available func(Case) bool) []StagePlan {
	var out []StagePlan
	for _, stage := range all {
		var cases []Case
		for _, c := range stage {
			if available(c) {
				cases = append(cases, c)
			}
		}
		out = append(out, stagePlan(cases))
	}
	return out
}

// stagePlan estimates one stage: its environments' setup and a round of its cases.
func stagePlan(cases []Case) StagePlan {
	p := StagePlan{Cases: len(cases), Round: func(time.Duration) time.Duration { return 0 }}
	if len(cases) == 0 {
		return p
	}
	p.Name = cases[0].Stage
	p.Setup = netnsSetup
	if p.Name != "" {
		p.Setup = labSetupEstimate
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if s, ok := c.Env.(*ServiceScale); ok && !seen[s.Name()] {
			seen[s.Name()] = true
			p.Setup += time.Duration(s.Services) * perFillerService
		}
	}
	p.Round = func(d time.Duration) time.Duration {
		var t time.Duration
		for _, c := range cases {
			t += runEstimate(c, d)
		}
		return t
	}
	return p
}

// runEstimate is the estimated cost of one run of c with runs of d.
func runEstimate(c Case, d time.Duration) time.Duration {
	switch {
	case c.Group == GroupControlPlane:
		return controlPlaneRun
	case isServiceCase(c):
		return d + serviceOverhead
	default:
		return d + runOverhead
	}
}

func isServiceCase(c Case) bool {
	_, ok := c.Env.(*ServiceScale)
	return ok
}

// planBudget plans the run (run length and first rounds) and records the plan.
func (r *runner) planBudget(all [][]Case) {
	r.plans = StagePlans(all, func(c Case) bool { return r.unavailable(c.Name) == "" })
	plan := PlanBudget(r.plans, r.cfg.Budget, min(BudgetMinRounds, r.cfg.Rounds), r.cfg.Duration)
	r.cfg.Duration, r.minRounds = plan.Duration, plan.MinRounds
	r.end = r.res.Started.Add(r.cfg.Budget)
	r.res.DurationSeconds = plan.Duration.Seconds()
	r.res.Budget = &BudgetInfo{BudgetSeconds: r.cfg.Budget.Seconds(), EstimateSeconds: plan.Estimate.Seconds(),
		MinRounds: plan.MinRounds, MaxRounds: r.cfg.Rounds, TargetSpread: BudgetTargetSpread, Plan: plan.String()}
	fmt.Fprintf(r.log, "bench: %s\n", plan)
}

// runBudgeted runs the stage's first rounds for every case, then extra rounds for the
// cases whose spread is still over the target, while the stage's share of the budget
// lasts.
func (r *runner) runBudgeted(ctx context.Context, cases []Case, byName map[string]Case, trials map[string]Trial) {
	var later time.Duration
	for _, p := range r.plans[r.stage+1:] {
		later += p.Min(r.minRounds, r.cfg.Duration)
	}
	this := r.plans[r.stage]
	// The deadline counts from the stage's start, before its setup.
	deadline := StageDeadline(r.stageStart, r.end, this.Min(r.minRounds, r.cfg.Duration), later)
	r.runSlots(ctx, Schedule(cases, r.minRounds), byName, trials)
	for round := r.minRounds + 1; round <= r.cfg.Rounds && ctx.Err() == nil; round++ {
		wide := WideCases(cases, r.res.Runs, BudgetTargetSpread, r.cfg.Rounds)
		if len(wide) == 0 {
			return
		}
		cost := roundCost(wide, r.res.Runs, r.cfg.Duration+runOverhead)
		if time.Now().Add(cost).After(deadline) {
			fmt.Fprintf(r.log, "bench: %d cases still spread over %.0f%% (or with one round); their round %d (about %s) would pass the stage's budget\n",
				len(wide), BudgetTargetSpread*100, round, cost.Round(time.Second))
			return
		}
		fmt.Fprintf(r.log, "bench: round %d for %d cases spread over %.0f%%\n", round, len(wide), BudgetTargetSpread*100)
		next := make([]Case, 0, len(wide))
		for _, name := range wide {
			next = append(next, byName[name])
		}
		r.runSlots(ctx, scheduleRounds(next, round, round), byName, trials)
	}
}
