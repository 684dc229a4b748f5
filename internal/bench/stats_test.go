package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	rr := []Metric{{Name: "rate"}, {Name: "p50_us"}}
	cases := []CaseInfo{
		{Name: "veth", Metrics: rr},
		{Name: "pod", Metrics: rr, Baseline: "veth"},
		{Name: "gone", Metrics: rr, Baseline: "veth", Unavailable: "needs flannel"},
	}
	runs := []RunRecord{
		{Round: 1, Case: "veth", Values: Sample{"rate": 100, "p50_us": 10}},
		{Round: 1, Case: "pod", Values: Sample{"rate": 90, "p50_us": 12}},
		{Round: 2, Case: "veth", Values: Sample{"rate": 50, "p50_us": 20}}, // a slow round hits both
		{Round: 2, Case: "pod", Values: Sample{"rate": 40, "p50_us": 22}},
		{Round: 3, Case: "veth", Error: "netperf failed"},
		{Round: 3, Case: "pod", Values: Sample{"rate": 95, "p50_us": 11}}, // no baseline this round
	}
	got := Summarize(cases, runs)
	want := []Summary{
		{Case: "veth", Metric: "rate", N: 2, Median: 75, Min: 50, Max: 100},
		{Case: "veth", Metric: "p50_us", N: 2, Median: 15, Min: 10, Max: 20},
		{Case: "pod", Metric: "rate", N: 3, Median: 90, Min: 40, Max: 95, Baseline: "veth", Ratio: ptr(0.85), RatioN: 2},
		{Case: "pod", Metric: "p50_us", N: 3, Median: 12, Min: 11, Max: 22, Baseline: "veth", Ratio: ptr(1.15), RatioN: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d summaries %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Case != w.Case || g.Metric != w.Metric || g.N != w.N || g.Median != w.Median || g.Min != w.Min ||
			g.Max != w.Max || g.Baseline != w.Baseline || g.RatioN != w.RatioN || !sameRatio(g.Ratio, w.Ratio) {
			t.Errorf("summary %d = %+v (ratio %v), want %+v (ratio %v)", i, g, deref(g.Ratio), w, deref(w.Ratio))
		}
	}
}

func TestSummarizeZeroBaseline(t *testing.T) {
	cases := []CaseInfo{{Name: "a", Metrics: []Metric{{Name: "loss_pct"}}}, {Name: "b", Baseline: "a", Metrics: []Metric{{Name: "loss_pct"}}}}
	runs := []RunRecord{{Round: 1, Case: "a", Values: Sample{"loss_pct": 0}}, {Round: 1, Case: "b", Values: Sample{"loss_pct": 2}}}
	for _, s := range Summarize(cases, runs) {
		if s.Ratio != nil {
			t.Errorf("%s: ratio %v to a zero baseline, want none", s.Case, *s.Ratio)
		}
	}
}

// TestSummarizeProgramMetrics: under --bpf-stats each program's run time
// (bpf_ns:<program>) is summarized after bpf_ns, in its unit, with ratios where the
// baseline ran the program too; one under 0.5% of the case's bpf_ns gets no row.
func TestSummarizeProgramMetrics(t *testing.T) {
	m := []Metric{{Name: MetricRate}, {Name: MetricBPFTime, Unit: "ns/trans"}, {Name: MetricBPFRuns}}
	cases := []CaseInfo{{Name: "direct", Metrics: m}, {Name: "svc", Metrics: m, Baseline: "direct"}}
	from, conn := ProgramMetric("myelin_from_pod"), ProgramMetric("myelin_sock_connect4")
	runs := []RunRecord{
		{Round: 1, Case: "direct", Values: Sample{MetricRate: 10, MetricBPFTime: 100, MetricBPFRuns: 4, from: 100}},
		{Round: 1, Case: "svc", Values: Sample{MetricRate: 9, MetricBPFTime: 300, MetricBPFRuns: 5, from: 120, conn: 180}},
		{Round: 2, Case: "svc", Values: Sample{MetricRate: 9, MetricBPFTime: 200, MetricBPFRuns: 5, from: 80, conn: 120,
			ProgramMetric("myelin_from_netdev"): 1}}, // 0.4% of bpf_ns: no row
	}
	var got []string
	for _, s := range Summarize(cases, runs) {
		line := fmt.Sprintf("%s %s %s %v", s.Case, s.Metric, s.Unit, s.Median)
		if s.Ratio != nil {
			line += fmt.Sprintf(" ratio %.2f", *s.Ratio)
		}
		got = append(got, line)
	}
	want := []string{
		"direct rate  10", "direct bpf_ns ns/trans 100", "direct bpf_ns:myelin_from_pod ns/trans 100", "direct bpf_runs  4",
		"svc rate  9 ratio 0.90", "svc bpf_ns ns/trans 250 ratio 3.00",
		"svc bpf_ns:myelin_from_pod ns/trans 100 ratio 1.20", "svc bpf_ns:myelin_sock_connect4 ns/trans 150",
		"svc bpf_runs  5 ratio 1.25",
	}
	if !slices.Equal(got, want) {
		t.Errorf("summaries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func ptr(f float64) *float64 { return &f }

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func sameRatio(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return math.Abs(*a-*b) < 1e-9
}
