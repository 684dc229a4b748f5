package bench

import (
	"math"
	"slices"
	"sort"
	"time"
)

// A RunRecord is one run of one case in one round: its figures or why it failed.
type RunRecord struct {
	Round   int       `json:"round"`
	Case    string    `json:"case"`
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	Values  Sample    `json:"values,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// CaseInfo describes a case in the results, with Unavailable saying why it did not run.
type CaseInfo struct {
	Name        string   `json:"name"`
	Group       string   `json:"group"`
	Stage       string   `json:"stage,omitempty"`
	Environment string   `json:"environment"`
	Workload    string   `json:"workload"`
	Placement   string   `json:"placement"`
	Baseline    string   `json:"baseline,omitempty"`
	Description string   `json:"description"`
	Metrics     []Metric `json:"metrics"`
	Unavailable string   `json:"unavailable,omitempty"`
}

// A Summary is the statistics of one metric of one case over the rounds.
type Summary struct {
	Case   string  `json:"case"`
	Metric string  `json:"metric"`
	Unit   string  `json:"unit"`
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Ratio is the median over rounds of this case's value divided by its baseline's
	// value in the same round; nil without a baseline or a round where both have a value.
	Baseline string   `json:"baseline,omitempty"`
	Ratio    *float64 `json:"ratio,omitempty"`
	RatioN   int      `json:"ratioN,omitempty"`
	// Spread is (max-min)/median of the per-round ratios, or of the values without a
	// ratio: how far the rounds disagree (see RelSpread; 0 for one round).
	Spread float64 `json:"spread"`
}

// Summarize computes, for every metric of every available case, the median, min and max
// over the rounds and the median of the per-round ratios to the case's baseline.
func Summarize(cases []CaseInfo, runs []RunRecord) []Summary {
	byRound := map[string]map[int]Sample{} // case -> round -> values
	for _, r := range runs {
		if r.Error != "" || r.Values == nil {
			continue
		}
		if byRound[r.Case] == nil {
			byRound[r.Case] = map[int]Sample{}
		}
		byRound[r.Case][r.Round] = r.Values
	}
	var out []Summary
	for _, c := range cases {
		if c.Unavailable != "" {
			continue
		}
		for _, m := range withProgramMetrics(c.Metrics, byRound[c.Name]) {
			vals := metricValues(byRound[c.Name], m.Name)
			if len(vals) == 0 {
				continue
			}
			s := Summary{Case: c.Name, Metric: m.Name, Unit: m.Unit, N: len(vals),
				Median: Median(vals), Min: minOf(vals), Max: maxOf(vals), Baseline: c.Baseline}
			s.Spread = finiteSpread(vals)
			if ratios := roundRatios(byRound[c.Name], byRound[c.Baseline], m.Name); len(ratios) > 0 {
				r := Median(ratios)
				s.Ratio, s.RatioN, s.Spread = &r, len(ratios), finiteSpread(ratios)
			}
			out = append(out, s)
		}
	}
	return out
}

// minProgramShare is the smallest share of a case's BPF run time a program must have
// to get a row: a program that ran for other traffic (an idle node's uplink) adds
// only noise, and ratios of near-zero figures.
const minProgramShare = 0.005

// withProgramMetrics adds to metrics, after the run time of all BPF programs
// (MetricBPFTime), the per-program figures the rounds carry (ProgramMetric) that
// reach minProgramShare of it, in its unit.
func withProgramMetrics(metrics []Metric, rounds map[int]Sample) []Metric {
	i := slices.IndexFunc(metrics, func(m Metric) bool { return m.Name == MetricBPFTime })
	if i < 0 {
		return metrics
	}
	total := Median(metricValues(rounds, MetricBPFTime))
	var progs []Metric
	for _, name := range programMetrics(rounds) {
		if Median(metricValues(rounds, name)) >= minProgramShare*total {
			progs = append(progs, Metric{Name: name, Unit: metrics[i].Unit})
		}
	}
	return slices.Concat(metrics[:i+1], progs, metrics[i+1:])
}

// metricValues returns a metric's values in round order.
func metricValues(rounds map[int]Sample, metric string) []float64 {
	var out []float64
	for _, r := range sortedRounds(rounds) {
		if v, ok := rounds[r][metric]; ok {
			out = append(out, v)
		}
	}
	return out
}

// roundRatios divides each round's value by the baseline's value of the same round,
// skipping rounds where either is missing or the baseline is zero.
func roundRatios(cs, base map[int]Sample, metric string) []float64 {
	var out []float64
	for _, r := range sortedRounds(cs) {
		v, ok := cs[r][metric]
		b, okB := base[r][metric]
		if ok && okB && b != 0 {
			out = append(out, v/b)
		}
	}
	return out
}

func sortedRounds(m map[int]Sample) []int {
	out := make([]int, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// Median returns the median of xs (the mean of the middle two for an even count); 0 for
// none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}

// finiteSpread is RelSpread with 0 for one value or a zero median (JSON has no +Inf).
func finiteSpread(xs []float64) float64 {
	if s := RelSpread(xs); !math.IsInf(s, 0) {
		return s
	}
	return 0
}
