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
	var prev []Case
	grown := map[*ServiceScaleLab]int{} // filler Services planned in each kept lab
	for _, stage := range all {
		var cases []Case
		for _, c := range stage {
			if available(c) {
				cases = append(cases, c)
			}
		}
		kept := len(sharedLabs(prev, cases)) > 0
		out = append(out, stagePlan(cases, kept, grown))
		prev = cases
	}
	return out
}

// stagePlan estimates one stage: its environments' setup and a round of its cases. kept
// says the stage's lab is the last stage's, kept up, with the filler Services in grown.
func stagePlan(cases []Case, kept bool, grown map[*ServiceScaleLab]int) StagePlan {
	p := StagePlan{Cases: len(cases), Round: func(time.Duration) time.Duration { return 0 }}
	if len(cases) == 0 {
		return p
	}
	p.Name = cases[0].Stage
	switch {
	case p.Name == "":
		p.Setup = netnsSetup
	case !kept:
		p.Setup = labSetupEstimate
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if counted(c.Workload) {
			p.Setup += calibrationRun // once: its runs go by count
		}
		if _, ok := c.Workload.(ServiceProgram); ok {
			p.Setup += fillerCost(0, programServices) // its first run creates them
		}
		if s, ok := c.Env.(*ServiceScale); ok && !seen[s.Name()] {
			seen[s.Name()] = true
			from := 0
			if kept {
				from = grown[s.lab]
			}
			p.Setup += fillerCost(from, s.Services) + s.proxyCost(s.Services-from)
			grown[s.lab] = s.Services
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

// fillerCost estimates creating and programming filler Services from+1 … to in one lab.
// The n-th costs more than the first: Kubernetes 1.34's apiserver counts every allocated
// ClusterIP on each allocation (docs/scale.md, "Creating Services in bulk"), so the cost
// is a·n + b·n² (fitted to 2,000, 4,000, 6,000 and 10,000 Services in 15, 37, 68 and
// ~184 s).
func fillerCost(from, to int) time.Duration {
	f := func(n int) float64 { x := float64(n); return fillerLinear*x + fillerQuadratic*x*x }
	return time.Duration((f(to) - f(from)) * float64(time.Second))
}

// runEstimate is the estimated cost of one run of c with runs of d.
func runEstimate(c Case, d time.Duration) time.Duration {
	if c.Group == GroupControlPlane {
		return controlPlaneRun
	}
	return d + runOverhead
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

// proxyCost estimates what the lab's proxy adds to programming n more Services:
// kube-proxy rewrites its rules as they arrive, myelin's agent is within fillerCost.
func (s *ServiceScale) proxyCost(n int) time.Duration {
	var per float64
	switch s.Proxy {
	case ProxyIPTables:
		per = kubeProxyCost
	case ProxyNFTables:
		per = kubeProxyNFCost
	}
	return time.Duration(per * float64(n) * float64(time.Second))
}
