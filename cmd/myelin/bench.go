package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/bench"
)

func benchCommand() *cobra.Command {
	var o bench.Options
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--budget D] [--rounds R] [--cases a,b,...] [--bpf-stats] [--out DIR] [--list]",
		Short: "Measure datapaths side by side: baselines, myelin's modes and peers, interleaved round by round",
		Long: `bench builds its environments, runs every selected case once per round (cases
interleaved round-robin so drift of the machine hits all alike; each case runs right
after its baseline, and every second round in reverse), tears everything down
(also on Ctrl-C) and writes report.md, results.json and SVG charts into --out: per case
and metric the median, min-max and the median ratio to its baseline measured in the same
round. Cases that cannot run here are reported as not available, with the reason.
Client and server are pinned to vCPUs (same-vcpu: 0,0; cross-vcpu: 0,1). Run as root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Command = strings.Join(os.Args, " ")
			if o.Quick && !cmd.Flags().Changed("rounds") {
				o.Rounds = bench.QuickRounds
			}
			return bench.Bench(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Quick, "quick", false, "1 round of 1 s runs of one case of every stage kind (labs included, a few minutes) unless --cases is given (then 1 s runs of those)")
	cmd.Flags().IntVar(&o.Rounds, "rounds", bench.DefaultRounds, "rounds: each selected case runs once per round (with --budget: the most rounds a case gets; default 1 with --quick)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "length of each run (default 5s, 1s with --quick; with --budget the plan picks 3s, 2s or 1s)")
	cmd.Flags().DurationVar(&o.Budget, "budget", 0, "bound the run's time (e.g. 30m): plan the run length and first rounds to fit, then give extra rounds (up to --rounds) to the cases whose figures spread most, until each is within 3% or the budget is spent")
	cmd.Flags().StringSliceVar(&o.Cases, "cases", nil, "cases to run: names, leading parts (veth-pair, loopback/tcp-rr) or globs of either (*/tcp-rr/same-vcpu, svc-*); their baselines are added")
	cmd.Flags().BoolVar(&o.BPFStats, "bpf-stats", false, "also report, per transaction of the netperf cases, the run time of the machine's BPF programs (bpf_ns; each program's, bpf_ns:<program>) and their runs (bpf_runs), from the kernel's BPF statistics turned on only for this run, and the myelin agents' CPU time (agent_us): a datapath cost with less noise than rates; every BPF program runs slower meanwhile, so take rates from runs without it")
	cmd.Flags().StringVar(&o.OutDir, "out", bench.DefaultOutDir, "directory for report.md, results.json and the charts")
	cmd.Flags().BoolVar(&o.List, "list", false, "list the cases and what each measures, and exit")
	return cmd
}
