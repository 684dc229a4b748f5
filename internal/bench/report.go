package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/statefile"
)

// Report file names in the output directory.
const (
	ReportMarkdown = "report.md"
	ReportJSON     = "results.json"
)

// WriteReport writes report.md, results.json and the charts into dir (created if
// missing) and returns the paths written.
func WriteReport(dir string, res *Results) ([]string, error) {
	if err := statefile.OutDir(dir); err != nil {
		return nil, err
	}
	charts, err := WriteCharts(dir, res)
	if err != nil {
		return nil, err
	}
	jsonPath := filepath.Join(dir, ReportJSON)
	if err := writeFile(jsonPath, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}); err != nil {
		return nil, err
	}
	mdPath := filepath.Join(dir, ReportMarkdown)
	if err := writeFile(mdPath, func(w io.Writer) error { return WriteMarkdown(w, res, charts) }); err != nil {
		return nil, err
	}
	return append([]string{mdPath, jsonPath}, charts...), nil
}

func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// WriteMarkdown renders the results as Markdown: how they were made, then one table per
// workload (every metric of every case: median, min–max, ratio to the baseline, N) with
// its charts, then the runs that failed. charts are chart paths to link by base name.
func WriteMarkdown(w io.Writer, res *Results, charts []string) error {
	p := &mdWriter{w: w}
	p.header(res)
	summaries := map[string][]Summary{}
	for _, s := range res.Summaries {
		summaries[s.Case] = append(summaries[s.Case], s)
	}
	for _, wl := range workloadOrder(res.Cases) {
		p.workloadTable(wl, res.Cases, summaries)
		for _, c := range charts {
			if base := filepath.Base(c); strings.HasPrefix(base, wl+"-") {
				p.printf("![%s](%s)\n\n", strings.TrimSuffix(base, filepath.Ext(base)), base)
			}
		}
	}
	p.failures(res.Runs)
	return p.err
}

type mdWriter struct {
	w   io.Writer
	err error
}

func (p *mdWriter) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *mdWriter) header(res *Results) {
	m := res.Machine
	p.printf("# myelin bench\n\n")
	p.printf("- command: `%s`\n", res.Command)
	p.printf("- date: %s, %s\n", res.Started.UTC().Format(time.RFC3339), res.Finished.Sub(res.Started).Round(time.Second))
	p.printf("- machine: %s, %d vCPUs, %d MiB, kernel %s", orUnknown(m.CPUModel), m.VCPUs, m.MemoryMiB, orUnknown(m.Kernel))
	if m.Environment != "" {
		p.printf(" (%s)", m.Environment)
	}
	p.printf("\n- tools: %s\n", toolList(m.Tools))
	if m.LabRuntime != "" {
		p.printf("- lab runtime: `--runtime %s`\n", m.LabRuntime)
	}
	p.printf("- %d rounds of %gs per case, cases interleaved round-robin, each next to its baseline, every second round reversed; ratios are the median of each round's "+
		"value divided by the baseline's value in the same round (for latency and CPU, lower is better)\n",
		res.Rounds, res.DurationSeconds)
	if b := res.Budget; b != nil {
		p.printf("- %s; at most %d rounds, a case stops at a spread of %.0f%% (spread: (max−min)/median of the "+
			"per-round ratios, or of the figures without a baseline)\n", b.Plan, b.MaxRounds, 100*b.TargetSpread)
	}
	if res.Interrupted {
		p.printf("- **interrupted**: the figures cover the rounds that finished\n")
	}
	for _, problem := range res.Problems {
		p.printf("- **problem**: %s\n", problem)
	}
	p.printf("\n")
}

func (p *mdWriter) workloadTable(wl string, cases []CaseInfo, summaries map[string][]Summary) {
	var desc string
	for _, c := range cases {
		if c.Workload == wl {
			desc = c.Description
			break
		}
	}
	p.printf("## %s\n\n%s\n\n", wl, desc)
	p.printf("| case | metric | median | min–max | ratio to baseline | spread | rounds |\n|---|---|---|---|---|---|---|\n")
	for _, c := range cases {
		if c.Workload != wl {
			continue
		}
		switch {
		case c.Unavailable != "":
			p.printf("| %s | | not available: %s | | | | 0 |\n", c.Name, mdEscape(c.Unavailable))
		case len(summaries[c.Name]) == 0:
			p.printf("| %s | | no successful run (see failed runs) | | | | 0 |\n", c.Name)
		}
		for _, s := range summaries[c.Name] {
			ratio := "—"
			if s.Ratio != nil {
				ratio = fmt.Sprintf("%.2f× %s", *s.Ratio, s.Baseline)
			}
			spread := "—" // one round has no spread
			if s.N > 1 {
				spread = fmt.Sprintf("%.1f%%", 100*s.Spread)
			}
			p.printf("| %s | %s (%s) | %s | %s–%s | %s | %s | %d |\n", c.Name, s.Metric, s.Unit,
				formatLike(s.Median, s.Median), formatLike(s.Min, s.Median), formatLike(s.Max, s.Median), ratio, spread, s.N)
		}
	}
	p.printf("\n")
}

func (p *mdWriter) failures(runs []RunRecord) {
	var failed []RunRecord
	for _, r := range runs {
		if r.Error != "" {
			failed = append(failed, r)
		}
	}
	if len(failed) == 0 {
		return
	}
	p.printf("## Failed runs\n\n")
	for _, r := range failed {
		p.printf("- round %d, %s: %s\n", r.Round, r.Case, r.Error)
	}
	p.printf("\n")
}

// workloadOrder lists the workloads in the order their first case appears.
func workloadOrder(cases []CaseInfo) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range cases {
		if !seen[c.Workload] {
			seen[c.Workload] = true
			out = append(out, c.Workload)
		}
	}
	return out
}

// FormatValue prints a figure with precision that suits its size: 25701, 38.7, 0.0524.
func FormatValue(v float64) string { return formatLike(v, v) }

// formatLike prints v with the precision FormatValue picks for ref, so that a median and
// its min–max read alike.
func formatLike(v, ref float64) string {
	switch a := math.Abs(ref); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func toolList(tools map[string]string) string {
	if len(tools) == 0 {
		return "unknown"
	}
	var parts []string
	for _, name := range []string{"netperf", "iperf3"} {
		if v, ok := tools[name]; ok {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, "; ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
