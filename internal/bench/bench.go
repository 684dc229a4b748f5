package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Options are the flags of `myelin bench`.
type Options struct {
	Quick    bool
	Rounds   int
	Duration time.Duration // of each run; 0 picks the default (1 s with Quick)
	Cases    []string      // patterns, see Select; empty: all (or QuickCases with Quick)
	OutDir   string
	List     bool
	// Prefix names the namespaces the baselines create; empty means ProductPrefix.
	Prefix string
	// Command is the command line recorded in the report.
	Command string
	// Budget, when positive, bounds the run's time: Rounds becomes the most rounds a
	// case gets and, without a Duration, the plan picks the run length (see PlanBudget).
	Budget time.Duration
	// BPFStats adds the BPF run time per transaction to the netperf cases (Config.BPFStats).
	BPFStats bool
}

// Defaults of `myelin bench`.
const (
	DefaultRounds   = 5
	DefaultDuration = 5 * time.Second
	QuickDuration   = time.Second
	DefaultOutDir   = "bench-results"
)

// Bench is `myelin bench`: it lists the cases, or runs the selected ones and writes the
// report into o.OutDir, also after an interrupt (with the rounds that finished).
func Bench(ctx context.Context, out io.Writer, o Options) error {
	prefix := o.Prefix
	if prefix == "" {
		prefix = ProductPrefix
	}
	all := Catalog(prefix)
	if o.List {
		return List(out, all)
	}
	patterns := o.Cases
	if len(patterns) == 0 && o.Quick {
		patterns = QuickCases
	}
	cases, err := Select(all, patterns)
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 { // without root no case builds anything (each says why)
		unlock, err := lockRun(lockDir, prefix)
		if err != nil {
			return err
		}
		defer unlock()
	}
	cfg := Config{Cases: cases, Rounds: o.Rounds, Duration: o.Duration, Command: o.Command, Log: out, Budget: o.Budget, BPFStats: o.BPFStats}
	if cfg.Rounds == 0 {
		cfg.Rounds = DefaultRounds
	}
	if cfg.Duration == 0 && cfg.Budget <= 0 {
		cfg.Duration = DefaultDuration
		if o.Quick {
			cfg.Duration = QuickDuration
		}
	}
	res, runErr := Run(ctx, cfg)
	if res == nil {
		return runErr
	}
	dir := o.OutDir
	if dir == "" {
		dir = DefaultOutDir
	}
	files, err := WriteReport(dir, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench: report in %s (%d files)\n", filepath.Join(dir, ReportMarkdown), len(files))
	if errors.Is(runErr, context.Canceled) {
		return fmt.Errorf("bench interrupted; everything it built is removed and %s has the runs that finished",
			filepath.Join(dir, ReportMarkdown))
	}
	return runErr
}

// List prints every case with its group, baseline and what it measures.
func List(out io.Writer, cases []Case) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tGROUP\tBASELINE\tMEASURES")
	for _, c := range cases {
		base := c.Baseline
		if base == "" {
			base = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Group, base, describe(c))
	}
	return tw.Flush()
}

func describe(c Case) string {
	var metrics []string
	for _, m := range c.Workload.Metrics() {
		metrics = append(metrics, m.Name)
	}
	where := fmt.Sprintf("client vCPU %d, server vCPU %d", c.Placement.Client, c.Placement.Server)
	if c.Placement.Client < 0 {
		where = "unpinned"
	}
	return fmt.Sprintf("%s [%s; %s]", c.Workload.Describe(), where, strings.Join(metrics, ", "))
}
