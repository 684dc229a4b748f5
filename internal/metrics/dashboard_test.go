package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowmetrics"
)

const (
	dashboardPath = "../../install/grafana/myelin-dashboard.json"
	metricsDoc    = "../../docs/metrics.md"
)

// exportedFamilies gathers every family both endpoints serve once they have
// something to report: the agent with a snapshot that has every part, the flow
// sink with every family on and flows of every kind.
func exportedFamilies(t *testing.T) []string {
	t.Helper()
	a := NewAgent()
	a.Use(knownSnapshot)
	a.ObserveSync("services", 1)
	a.LoadFailed()
	s := flowmetrics.New(flowmetrics.Families, flowmetrics.Options{})
	s.Observe([]flow.Record{
		{Type: flow.TypeL3L4, Proto: 6, DstPort: 80, TCPFlags: flow.TCPFlagSYN},
		{Type: flow.TypeDrop, DropReason: "DROP_POLICY_DENIED", Proto: 6},
		{Type: flow.TypeL3L4, Proto: 1, SrcPort: 8 << 8},
		{Type: flow.TypeDNS, Proto: 17, DNS: &flow.DNS{QType: "A"}},
		{Type: flow.TypeDNS, Proto: 17, DNS: &flow.DNS{QType: "A", Response: true, RCode: "NOERROR"}},
	})
	var names []string
	for _, reg := range []prometheus.Gatherer{a.Registry(), s.Registry()} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
	}
	// Every scrape-time family shows with a full snapshot.
	for _, d := range allDescs {
		if name := descName(d); !slices.Contains(names, name) {
			t.Errorf("%s is described but not gathered from a full snapshot", name)
		}
	}
	return names
}

// dashboardQueries returns every PromQL expression of the dashboard (panel
// targets) and the metric names its template variables query.
func dashboardQueries(t *testing.T) (exprs, variableMetrics []string) {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse %s: %v", dashboardPath, err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q: a target without expr", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("template variable query %q: want label_values(metric, label)", q)
			continue
		}
		variableMetrics = append(variableMetrics, m[1])
	}
	return exprs, variableMetrics
}

// grafanaVars are Grafana's variables and macros, replaced by values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$node", "node1")

// selectedMetrics parses expr and returns the metric name of every selector in it.
func selectedMetrics(expr string) ([]string, error) {
	e, err := parser.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names, nil
}

// servedName maps a name a query selects to the family that serves it (a
// histogram's _bucket, _sum and _count series belong to its family).
func servedName(name string, families []string) bool {
	if slices.Contains(families, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(families, base) {
			return true
		}
	}
	return false
}

// TestDashboardQueriesNameExportedMetrics: every query of the shipped Grafana
// dashboard parses as PromQL and selects only metrics the agent exports, by name.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	families := exportedFamilies(t)
	exprs, varMetrics := dashboardQueries(t)
	if len(exprs) < 20 {
		t.Fatalf("dashboard has %d queries; want its panels' queries", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names, err := selectedMetrics(e)
		if err != nil {
			t.Errorf("query %q does not parse: %v", e, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("query %q selects no metric by name", e)
		}
		for _, n := range names {
			used[n] = true
			if n == "" || !servedName(n, families) {
				t.Errorf("query %q selects %q, which the agent does not export", e, n)
			}
		}
	}
	for _, n := range varMetrics {
		if !servedName(n, families) {
			t.Errorf("template variable queries %q, which the agent does not export", n)
		}
	}
	// A metric nobody can see on the dashboard is fine, but the headline ones must be there.
	for _, n := range []string{"myelin_endpoints", "myelin_drop_count_total", "myelin_forward_bytes_total",
		"myelin_bpf_map_pressure", "myelin_host_routing_mode", "hubble_flows_processed_total", "hubble_drop_total"} {
		if !used[n] {
			t.Errorf("the dashboard shows no %s", n)
		}
	}
}

// TestEveryMetricDocumented: docs/metrics.md names every family the agent
// exports (the Go runtime and process collectors as their prefixes).
func TestEveryMetricDocumented(t *testing.T) {
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range exportedFamilies(t) {
		switch {
		case strings.HasPrefix(n, "go_"), strings.HasPrefix(n, "process_"):
			prefix, _, _ := strings.Cut(n, "_")
			if !strings.Contains(doc, "`"+prefix+"_*`") {
				t.Errorf("%s: docs/metrics.md does not mention `%s_*`", n, prefix)
			}
		case !strings.Contains(doc, "`"+n+"`"):
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
}

// TestSelectedMetricsCatchesUnknown: the check itself sees through functions,
// aggregations and binary operators, and the name of a {__name__="..."} selector.
func TestSelectedMetricsCatchesUnknown(t *testing.T) {
	names, err := selectedMetrics(`sum by (x) (rate(a_total{instance=~"($node):[0-9]+"}[$__rate_interval])) / on() group_left {__name__="b"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a_total", "b"}) {
		t.Errorf("selected %v, want [a_total b]", names)
	}
	if servedName("myelin_nope", []string{"myelin_endpoints"}) {
		t.Error("an unknown name counted as served")
	}
	if !servedName("myelin_api_sync_latency_seconds_bucket", []string{"myelin_api_sync_latency_seconds"}) {
		t.Error("a histogram's _bucket not counted as its family")
	}
}

// descName is the fully-qualified name of d.
func descName(d *prometheus.Desc) string {
	m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
	if m == nil {
		return d.String()
	}
	return m[1]
}
