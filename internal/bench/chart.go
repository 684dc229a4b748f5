package bench

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteCharts draws, for each workload, its headline metric per case (median bar with a
// min–max whisker) and, when any case has a baseline, the ratio to the baseline, as SVG
// files named <workload>-<metric>.svg and <workload>-ratio.svg. It returns their paths.
func WriteCharts(dir string, res *Results) ([]string, error) {
	var out []string
	for _, wl := range workloadOrder(res.Cases) {
		headline := headlineMetric(res.Cases, wl)
		if headline.Name == "" {
			continue
		}
		var values, ratios []Summary
		for _, s := range res.Summaries {
			if s.Metric != headline.Name || workloadOf(res.Cases, s.Case) != wl {
				continue
			}
			values = append(values, s)
			if s.Ratio != nil {
				ratios = append(ratios, s)
			}
		}
		if len(values) > 0 {
			path := filepath.Join(dir, fmt.Sprintf("%s-%s.svg", wl, headline.Name))
			title := fmt.Sprintf("%s %s (%s), median and min–max", wl, headline.Name, headline.Unit)
			if err := barChart(path, title, values, false); err != nil {
				return out, err
			}
			out = append(out, path)
		}
		if len(ratios) > 0 {
			path := filepath.Join(dir, wl+"-ratio.svg")
			title := fmt.Sprintf("%s %s: ratio to baseline (same round, median)", wl, headline.Name)
			if err := barChart(path, title, ratios, true); err != nil {
				return out, err
			}
			out = append(out, path)
		}
	}
	return out, nil
}

// barChart draws one horizontal bar per summary, the first at the top. For ratios it
// draws the ratio medians and a reference line at 1; otherwise medians with min–max
// whiskers.
func barChart(path, title string, sums []Summary, ratio bool) error {
	n := len(sums)
	top := 0.0 // the x axis ends past the longest bar or whisker
	vals := make(plotter.Values, n)
	names := make([]string, n)
	whiskers := rangeBars{XYs: make(plotter.XYs, n), XErrors: make(plotter.XErrors, n)}
	for i, s := range sums {
		j := n - 1 - i // NominalY puts index 0 at the bottom
		names[j] = s.Case
		if ratio {
			vals[j] = *s.Ratio
			top = max(top, 1, *s.Ratio)
			continue
		}
		vals[j] = s.Median
		top = max(top, s.Max)
		whiskers.XYs[j] = plotter.XY{X: s.Median, Y: float64(j)}
		whiskers.XErrors[j].Low, whiskers.XErrors[j].High = s.Median-s.Min, s.Max-s.Median
	}
	p := plot.New()
	p.Title.Text = title
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	bars.Horizontal = true
	bars.LineStyle.Width = 0
	bars.Color = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	p.Add(bars)
	if ratio {
		one, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(n) - 0.5}})
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(one)
		p.X.Label.Text = "× baseline"
	} else {
		eb, err := plotter.NewXErrorBars(whiskers)
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		eb.LineStyle.Width = vg.Points(1.5)
		p.Add(eb)
	}
	p.X.Min, p.X.Max = 0, top*1.08
	p.NominalY(names...)
	height := vg.Centimeter * vg.Length(2.5+0.8*float64(n))
	if err := p.Save(18*vg.Centimeter, height, path); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}

// rangeBars are min–max whiskers around each median.
type rangeBars struct {
	plotter.XYs
	plotter.XErrors
}

func headlineMetric(cases []CaseInfo, workload string) Metric {
	for _, c := range cases {
		if c.Workload == workload && len(c.Metrics) > 0 {
			return c.Metrics[0]
		}
	}
	return Metric{}
}

func workloadOf(cases []CaseInfo, name string) string {
	for _, c := range cases {
		if c.Name == name {
			return c.Workload
		}
	}
	return ""
}
