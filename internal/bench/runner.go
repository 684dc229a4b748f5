package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Config is one bench run.
type Config struct {
	Cases    []Case
	Rounds   int
	Duration time.Duration // of each run of each case
	// Command is the command line recorded in the results.
	Command string
	// Log receives one line per run and per setup step; nil discards them.
	Log io.Writer
	// Budget, when positive, bounds the run's time (see PlanBudget): Rounds is then the
	// most rounds a case gets, and a zero Duration lets the plan pick the run length.
	Budget time.Duration
	// BPFStats turns on the kernel's BPF statistics for the run and adds the BPF run
	// time per transaction (or KB) to the netperf cases' samples.
	BPFStats bool
}

// Results is everything a run measured, as written to results.json.
type Results struct {
	Machine         Machine     `json:"machine"`
	Command         string      `json:"command"`
	Started         time.Time   `json:"started"`
	Finished        time.Time   `json:"finished"`
	Rounds          int         `json:"rounds"`
	DurationSeconds float64     `json:"durationSeconds"`
	Interrupted     bool        `json:"interrupted,omitempty"`
	Problems        []string    `json:"problems,omitempty"`
	Cases           []CaseInfo  `json:"cases"`
	Runs            []RunRecord `json:"runs"`
	Summaries       []Summary   `json:"summaries"`
	Budget          *BudgetInfo `json:"budget,omitempty"`
}

// Run checks which cases this machine can run, then runs every stage: it sets up the
// stage's environments once, starts their servers, runs the cases round-robin for
// cfg.Rounds rounds and tears everything down, also when ctx is cancelled. A case that
// cannot run is kept in the results with the reason. Run returns the results even when
// interrupted (with ctx's error) so that the figures so far can be reported.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := Validate(cfg.Cases); err != nil {
		return nil, err
	}
	if err := checkRunFlags(cfg); err != nil {
		return nil, err
	}
	res := &Results{Machine: DescribeMachine(), Command: cfg.Command, Started: time.Now(),
		Rounds: cfg.Rounds, DurationSeconds: cfg.Duration.Seconds(), Runs: []RunRecord{}}
	for _, c := range cfg.Cases {
		res.Cases = append(res.Cases, describeCase(c, Availability(c)))
	}
	if cfg.BPFStats {
		stats, err := enableBPFStats()
		if err != nil {
			return nil, err
		}
		defer stats.Close()
	}
	r := &runner{cfg: cfg, res: res, log: cfg.Log}
	if r.log == nil {
		r.log = io.Discard
	}
	all := stages(cfg.Cases)
	if cfg.Budget > 0 {
		r.planBudget(all) // budgetrun.go
	}
	var teardownErrs []error
	var held []*Cluster // labs of this stage kept up since the last one
	for i, stage := range all {
		if ctx.Err() != nil {
			break
		}
		var next []*Cluster
		if i+1 < len(all) {
			next = sharedLabs(stage, all[i+1])
		}
		for _, c := range next {
			c.hold()
		}
		r.stage, r.stageStart = i, time.Now()
		teardownErrs = append(teardownErrs, r.runStage(ctx, stage, held))
		held = next
	}
	for _, c := range held { // the stage that would have taken them over did not start
		teardownErrs = append(teardownErrs, c.release())
	}
	res.Interrupted = ctx.Err() != nil
	res.Finished = time.Now()
	res.Summaries = Summarize(res.Cases, res.Runs)
	if err := errors.Join(teardownErrs...); err != nil {
		res.Problems = append(res.Problems, err.Error())
		return res, fmt.Errorf("tear down bench environments: %w", err)
	}
	if res.Interrupted {
		return res, ctx.Err()
	}
	return res, nil
}

// runner carries one Run's state across its stages.
type runner struct {
	cfg Config
	res *Results
	log io.Writer
	// With a budget: the stages' plans, the index of the running stage and the end of
	// the budget.
	plans      []StagePlan
	stage      int
	stageStart time.Time
	minRounds  int
	end        time.Time
}

// runStage builds the environments of one stage, runs its rounds and tears down; it
// returns the teardown errors. held are labs the previous stage kept up for this one: it
// releases them once its environments hold them.
func (r *runner) runStage(ctx context.Context, cases []Case, held []*Cluster) (teardownErr error) {
	var built []Environment
	defer func() {
		for i := len(built) - 1; i >= 0; i-- {
			if err := built[i].Teardown(); err != nil {
				teardownErr = errors.Join(teardownErr, fmt.Errorf("%s: %w", built[i].Name(), err))
			}
		}
	}()
	endpoints := r.setUp(ctx, cases, &built)
	for _, c := range held {
		if err := c.release(); err != nil {
			teardownErr = errors.Join(teardownErr, err)
		}
	}
	srvs := newServers()
	defer srvs.stopAll()
	trials := r.startServers(ctx, cases, endpoints, srvs)
	var runnable []Case
	byName := map[string]Case{}
	for _, c := range cases {
		if _, ok := trials[c.Name]; ok {
			runnable = append(runnable, c)
			byName[c.Name] = c
		}
	}
	if r.cfg.Budget > 0 {
		r.runBudgeted(ctx, runnable, byName, trials) // budgetrun.go
		return nil
	}
	r.runSlots(ctx, Schedule(runnable, r.cfg.Rounds), byName, trials)
	return nil
}

// A labEnvironment is built on a lab that environments of other stages may share: the
// runner keeps it up between consecutive stages that do (ServiceScale grows its Services
// in place from one count to the next).
type labEnvironment interface {
	labCluster() *Cluster
}

// sharedLabs are the labs that environments of both stages are built on.
func sharedLabs(stage, next []Case) []*Cluster {
	uses := map[*Cluster]bool{}
	for _, c := range stage {
		if e, ok := c.Env.(labEnvironment); ok {
			uses[e.labCluster()] = true
		}
	}
	var out []*Cluster
	for _, c := range next {
		if e, ok := c.Env.(labEnvironment); ok && uses[e.labCluster()] && !slices.Contains(out, e.labCluster()) {
			out = append(out, e.labCluster())
		}
	}
	return out
}

// runSlots runs the slots in order until ctx is done.
func (r *runner) runSlots(ctx context.Context, slots []Slot, byName map[string]Case, trials map[string]Trial) {
	for _, slot := range slots {
		if ctx.Err() != nil {
			return
		}
		c, t := byName[slot.Case], trials[slot.Case]
		t.Transactions = r.transactions(ctx, c, t)
		rec := runOnce(ctx, c, t, slot.Round)
		if ctx.Err() != nil && rec.Error != "" {
			return // the run was cut short by the interrupt; it is not a figure
		}
		r.res.Runs = append(r.res.Runs, rec)
		r.logRun(byName[slot.Case], rec)
	}
}

// transactions is the count a Counted case's next run goes by, so it lasts about as
// long as a timed run: its last successful run's rate × the run length or, before its
// first run, the rate of a short calibration run (calibrationTransactions, not
// recorded); 0 (a timed run) for other workloads and when the calibration fails.
func (r *runner) transactions(ctx context.Context, c Case, t Trial) int64 {
	if !counted(c.Workload) {
		return 0
	}
	rate := r.lastRate(c.Name)
	if rate == 0 {
		t.Transactions = calibrationTransactions
		if s, err := c.Workload.Run(ctx, t); err == nil {
			rate = s[MetricRate]
		}
	}
	return int64(math.Ceil(rate * t.Duration.Seconds()))
}

// lastRate is the rate of the case's last successful run, 0 without one.
func (r *runner) lastRate(name string) float64 {
	for i := len(r.res.Runs) - 1; i >= 0; i-- {
		if run := r.res.Runs[i]; run.Case == name && run.Error == "" {
			return run.Values[MetricRate]
		}
	}
	return 0
}

// setUp builds each environment of the available cases once, appending it to built
// before Setup so that a half-built one is torn down too. A failed Setup makes its cases
// unavailable.
func (r *runner) setUp(ctx context.Context, cases []Case, built *[]Environment) map[string]Endpoints {
	endpoints := map[string]Endpoints{}
	tried := map[string]bool{}
	for _, c := range cases {
		name := c.Env.Name()
		if tried[name] || r.unavailable(c.Name) != "" || ctx.Err() != nil {
			continue
		}
		tried[name] = true
		fmt.Fprintf(r.log, "bench: setting up %s\n", name)
		*built = append(*built, c.Env)
		ep, err := c.Env.Setup(ctx)
		if err != nil {
			r.markEnv(cases, name, fmt.Sprintf("setting up %s failed: %v", name, err))
			continue
		}
		endpoints[name] = ep
	}
	return endpoints
}

// startServers starts the servers the runnable cases need and returns each runnable
// case's trial; a case whose server does not start becomes unavailable.
func (r *runner) startServers(ctx context.Context, cases []Case, endpoints map[string]Endpoints, srvs *servers) map[string]Trial {
	trials := map[string]Trial{}
	for _, c := range cases {
		ep, ok := endpoints[c.Env.Name()]
		if !ok || r.unavailable(c.Name) != "" || ctx.Err() != nil {
			continue
		}
		t := Trial{Client: ep.Client, Placement: c.Placement, Duration: r.cfg.Duration, BPFStats: r.cfg.BPFStats}
		if spec := workloadServer(c.Workload); spec != nil {
			target, err := srvs.target(ctx, c.Env.Name(), ep, spec, c.Placement.Server)
			if err != nil {
				r.mark(c.Name, err.Error())
				continue
			}
			t.Server = target
		}
		trials[c.Name] = t
	}
	return trials
}

// runOnce runs one case once.
func runOnce(ctx context.Context, c Case, t Trial, round int) RunRecord {
	rec := RunRecord{Round: round, Case: c.Name, Start: time.Now()}
	s, err := c.Workload.Run(ctx, t)
	rec.Seconds = time.Since(rec.Start).Seconds()
	if err != nil {
		rec.Error = err.Error()
	} else {
		rec.Values = s
	}
	return rec
}

func (r *runner) logRun(c Case, rec RunRecord) {
	if rec.Error != "" {
		fmt.Fprintf(r.log, "bench: round %d/%d %s: failed: %s\n", rec.Round, r.cfg.Rounds, c.Name, rec.Error)
		return
	}
	m := c.Workload.Metrics()[0]
	fmt.Fprintf(r.log, "bench: round %d/%d %s: %s %s %s\n", rec.Round, r.cfg.Rounds, c.Name, m.Name, FormatValue(rec.Values[m.Name]), m.Unit)
}

func (r *runner) unavailable(name string) string {
	for _, c := range r.res.Cases {
		if c.Name == name {
			return c.Unavailable
		}
	}
	return ""
}

func (r *runner) mark(name, reason string) {
	for i := range r.res.Cases {
		if r.res.Cases[i].Name == name && r.res.Cases[i].Unavailable == "" {
			r.res.Cases[i].Unavailable = reason
		}
	}
	fmt.Fprintf(r.log, "bench: %s not available: %s\n", name, reason)
}

func (r *runner) markEnv(cases []Case, env, reason string) {
	for _, c := range cases {
		if c.Env.Name() == env {
			r.mark(c.Name, reason)
		}
	}
}

func describeCase(c Case, unavailable error) CaseInfo {
	info := CaseInfo{Name: c.Name, Group: c.Group, Stage: c.Stage, Environment: c.Env.Name(),
		Workload: c.Workload.Name(), Placement: c.Placement.Name, Baseline: c.Baseline,
		Description: c.Workload.Describe(), Metrics: c.Workload.Metrics()}
	if unavailable != nil {
		info.Unavailable = unavailable.Error()
	}
	return info
}

// MaxDuration bounds one run's --duration: the load generators stop by themselves.
const MaxDuration = 5 * time.Minute

// checkRunFlags refuses rounds, duration and budget a run can't use, naming the flag.
func checkRunFlags(cfg Config) error {
	switch {
	case cfg.Rounds < 1:
		return fmt.Errorf("--rounds %d: must be at least 1", cfg.Rounds)
	case cfg.Budget < 0:
		return fmt.Errorf("--budget %s: must be positive, or 0 for no budget", cfg.Budget)
	case cfg.Duration < 0 || cfg.Duration > MaxDuration:
		return fmt.Errorf("--duration %s: must be between 0 and %s (0 only with --budget, which picks it)", cfg.Duration, MaxDuration)
	case cfg.Duration == 0 && cfg.Budget == 0:
		return fmt.Errorf("--duration 0 without --budget: give each run a duration (e.g. 3s) or a --budget to plan one")
	}
	return nil
}
