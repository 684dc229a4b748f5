package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sampleResults() *Results {
	rr := Netperf{Test: TestTCPRR}
	cases := []CaseInfo{
		{Name: "loopback/tcp-rr/same-vcpu", Group: GroupBaseline, Workload: "tcp-rr", Metrics: rr.Metrics(), Description: rr.Describe()},
		{Name: "veth-pair/tcp-rr/same-vcpu", Group: GroupBaseline, Workload: "tcp-rr", Metrics: rr.Metrics(),
			Baseline: "loopback/tcp-rr/same-vcpu", Description: rr.Describe()},
		{Name: "flannel-vxlan/tcp-rr/same-vcpu", Group: GroupPeer, Workload: "tcp-rr", Metrics: rr.Metrics(),
			Unavailable: "needs flannel v0.26.7 (scripts/build-flannel.sh)"},
		{Name: "veth-pair/udp-loss/same-vcpu", Group: GroupBaseline, Workload: "udp-loss", Metrics: UDPLoss().Metrics()},
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var runs []RunRecord
	for round := 1; round <= 3; round++ {
		f := float64(round)
		runs = append(runs,
			RunRecord{Round: round, Case: cases[0].Name, Start: start, Values: Sample{MetricRate: 100000 + f, MetricP50: 10, MetricP99: 20 + f}},
			RunRecord{Round: round, Case: cases[1].Name, Start: start, Values: Sample{MetricRate: 90000 + f, MetricP50: 12, MetricP99: 25}},
		)
	}
	runs = append(runs, RunRecord{Round: 1, Case: cases[3].Name, Error: "iperf3: unable to connect to server"})
	res := &Results{Machine: Machine{CPUModel: "Test CPU", VCPUs: 2, MemoryMiB: 2048, Kernel: "6.1.0",
		Tools: map[string]string{"netperf": "Netperf version 2.7.0"}},
		Command: "myelin bench --rounds 3", Started: start, Finished: start.Add(time.Minute),
		Rounds: 3, DurationSeconds: 1, Cases: cases, Runs: runs}
	res.Summaries = Summarize(cases, runs)
	return res
}

func TestWriteReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	res := sampleResults()
	files, err := WriteReport(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ReportMarkdown, ReportJSON, "tcp-rr-rate.svg", "tcp-rr-ratio.svg"} {
		st, err := os.Stat(filepath.Join(dir, want))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty (%v); wrote %v", want, err, files)
		}
	}

	md := readFile(t, filepath.Join(dir, ReportMarkdown))
	for _, want := range []string{
		"command: `myelin bench --rounds 3`", "Test CPU, 2 vCPUs, 2048 MiB, kernel 6.1.0", "Netperf version 2.7.0",
		"| case | metric | median | min–max | ratio to baseline | spread | rounds |",
		"| loopback/tcp-rr/same-vcpu | rate (trans/s) | 100002 | 100001–100003 | — | 0.0% | 3 |",
		"| veth-pair/tcp-rr/same-vcpu | rate (trans/s) | 90002 | 90001–90003 | 0.90× loopback/tcp-rr/same-vcpu | 0.0% | 3 |",
		"| flannel-vxlan/tcp-rr/same-vcpu | | not available: needs flannel v0.26.7 (scripts/build-flannel.sh) |",
		"| veth-pair/udp-loss/same-vcpu | | no successful run",
		"## Failed runs", "round 1, veth-pair/udp-loss/same-vcpu: iperf3: unable to connect",
		"![tcp-rr-rate](tcp-rr-rate.svg)", "![tcp-rr-ratio](tcp-rr-ratio.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}

	var back Results
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ReportJSON))), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != len(res.Runs) || len(back.Cases) != 4 || back.Machine.VCPUs != 2 ||
		back.Command != res.Command || back.Runs[0].Values[MetricRate] != 100001 || len(back.Summaries) == 0 {
		t.Errorf("results.json does not round-trip: %+v", back)
	}

	svg := readFile(t, filepath.Join(dir, "tcp-rr-rate.svg"))
	if !strings.Contains(svg, "<svg") || !strings.Contains(svg, "veth-pair/tcp-rr/same-vcpu") {
		t.Errorf("tcp-rr-rate.svg is not a chart of the cases")
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{25701.4: "25701", 38.66: "38.7", 3.14159: "3.14", 0.05243: "0.0524", 0: "0"} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
