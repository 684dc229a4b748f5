package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/logtail"
)

// Netperf tests as netperf names them.
const (
	TestTCPRR     = "TCP_RR"
	TestTCPCRR    = "TCP_CRR"
	TestTCPStream = "TCP_STREAM"
)

// netperfSelectors are the omni output selectors asked for. They are printed with -k
// (KEY=VALUE lines) rather than -O (aligned columns): the same selectors, but each value
// names itself, so the parser doesn't depend on column order or widths.
var netperfSelectors = []string{
	"THROUGHPUT", "THROUGHPUT_UNITS", "P50_LATENCY", "P90_LATENCY", "P99_LATENCY",
	"MEAN_LATENCY", "LOCAL_CPU_UTIL", "REMOTE_CPU_UTIL", "LOCAL_SD", "REMOTE_SD", "SD_UNITS",
	"ELAPSED_TIME",
}

// Metric names of the netperf workloads.
const (
	MetricRate        = "rate"
	MetricP50         = "p50_us"
	MetricP90         = "p90_us"
	MetricP99         = "p99_us"
	MetricMeanLatency = "mean_us"
	MetricSDClient    = "sd_client"
	MetricSDServer    = "sd_server"
	MetricStatCPU     = "stat_cpu"
	MetricThroughput  = "throughput_mbps"
)

// NetperfServer is netserver listening on the environment's server address.
var NetperfServer = &ServerSpec{
	Name:     "netserver",
	BasePort: 12865,
	Argv: func(addr netip.Addr, port int) []string {
		return []string{"netserver", "-D", "-L", addr.String(), "-p", strconv.Itoa(port)}
	},
}

// Netperf is a netperf omni test with client and server CPU measurement (-c -C) for the
// service demand. Request/response tests use 1-byte requests and responses, as published
// CNI benchmarks do.
type Netperf struct {
	Test string // TestTCPRR, TestTCPCRR or TestTCPStream
	// DataPort fixes the server's data port (netperf -P ,PORT); 0 lets netserver pick.
	// Behind a Service, the data connections must use a port the Service forwards.
	DataPort int
}

// TCPRR, TCPCRR and TCPStream are the netperf workloads.
func TCPRR() Workload     { return Netperf{Test: TestTCPRR} }
func TCPCRR() Workload    { return Netperf{Test: TestTCPCRR} }
func TCPStream() Workload { return Netperf{Test: TestTCPStream} }

// Name implements Workload: "tcp-rr", "tcp-crr", "tcp-stream".
func (n Netperf) Name() string { return strings.ReplaceAll(strings.ToLower(n.Test), "_", "-") }

// Describe implements Workload.
func (n Netperf) Describe() string {
	switch n.Test {
	case TestTCPRR:
		return "netperf TCP_RR, 1-byte request/response on one connection: transactions/s, P50/P90/P99 latency, CPU per transaction"
	case TestTCPCRR:
		return "netperf TCP_CRR, connect + 1-byte request/response + close: connections/s, latency percentiles, CPU per connection"
	default:
		return "netperf TCP_STREAM, bulk one-way TCP: Mbit/s and CPU per KB (service demand)"
	}
}

func (n Netperf) isStream() bool { return n.Test == TestTCPStream }

// Metrics implements Workload.
func (n Netperf) Metrics() []Metric {
	if n.isStream() {
		return append([]Metric{
			{Name: MetricThroughput, Unit: "Mbit/s", HigherIsBetter: true, Description: "bulk throughput"},
			{Name: MetricSDClient, Unit: "µs/KB", Description: "netperf local service demand: sender CPU per KB"},
			{Name: MetricSDServer, Unit: "µs/KB", Description: "netperf remote service demand: receiver CPU per KB"},
			{Name: MetricStatCPU, Unit: "µs/KB", Description: "busy CPU of the whole machine per KB, from /proc/stat"},
		}, bpfMetrics("KB", "KB")...)
	}
	unit := "trans/s"
	if n.Test == TestTCPCRR {
		unit = "conn/s"
	}
	return append([]Metric{
		{Name: MetricRate, Unit: unit, HigherIsBetter: true, Description: "transactions per second"},
		{Name: MetricP50, Unit: "µs", Description: "median transaction latency"},
		{Name: MetricP90, Unit: "µs", Description: "90th percentile transaction latency"},
		{Name: MetricP99, Unit: "µs", Description: "99th percentile transaction latency"},
		{Name: MetricMeanLatency, Unit: "µs", Description: "mean transaction latency"},
		{Name: MetricSDClient, Unit: "µs/trans", Description: "netperf local service demand: client CPU per transaction"},
		{Name: MetricSDServer, Unit: "µs/trans", Description: "netperf remote service demand: server CPU per transaction"},
		{Name: MetricStatCPU, Unit: "µs/trans", Description: "busy CPU of the whole machine per transaction, from /proc/stat"},
	}, bpfMetrics("trans", "transaction")...)
}

// Tools implements ToolUser.
func (n Netperf) Tools() []string { return []string{"netperf", "netserver", "taskset", "nsenter"} }

// Server implements ClientServer.
func (n Netperf) Server() *ServerSpec { return NetperfServer }

// Argv is the netperf command line of one trial.
func (n Netperf) Argv(t Trial) []string {
	length := strconv.Itoa(seconds(t.Duration))
	if t.Transactions > 0 && n.Counted() {
		length = strconv.FormatInt(-t.Transactions, 10) // netperf: a negative length is a count
	}
	argv := []string{"netperf", "-H", t.Server.Addr.String(), "-p", strconv.Itoa(t.Server.Port),
		"-t", n.Test, "-l", length, "-c", "-C", "-P", "0"}
	if t.Placement.Client >= 0 && t.Placement.Server >= 0 {
		argv = append(argv, "-T", fmt.Sprintf("%d,%d", t.Placement.Client, t.Placement.Server))
	}
	argv = append(argv, "--")
	if n.DataPort != 0 {
		argv = append(argv, "-P", ","+strconv.Itoa(n.DataPort))
	}
	if !n.isStream() {
		argv = append(argv, "-r", "1,1")
	}
	return append(argv, "-k", strings.Join(netperfSelectors, ","))
}

// Counted implements Counted: TCP_CRR runs go by count.
func (n Netperf) Counted() bool { return n.Test == TestTCPCRR }

// Run implements Workload.
func (n Netperf) Run(ctx context.Context, t Trial) (Sample, error) {
	limit := t.Duration + toolGrace
	if t.Transactions > 0 {
		limit += 2 * t.Duration // a run by count may go slower than the last
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	bpf, err := startBPFMeter(t.BPFStats)
	if err != nil {
		return nil, err
	}
	meter := startCPUMeter()
	cmd := t.Client.Command(ctx, t.Placement.Client, n.Argv(t)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("netperf %s to %s:%d: %w: %s", n.Test, t.Server.Addr, t.Server.Port, err, toolMessage(stdout.String(), stderr.String()))
	}
	busy, busyOK := meter.busySeconds()
	kv, err := ParseNetperfKeyval(stdout.String())
	if err != nil {
		return nil, err
	}
	s, err := n.sample(kv)
	if err != nil {
		return nil, err
	}
	units := n.units(s, kv["ELAPSED_TIME"])
	if busyOK && units > 0 {
		s[MetricStatCPU] = busy * 1e6 / units
	}
	if err := bpf.addTo(s, units); err != nil {
		return nil, err
	}
	return s, nil
}

// ParseNetperfKeyval parses netperf's -k output: one KEY=VALUE per line.
func ParseNetperfKeyval(out string) (map[string]string, error) {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && k != "" {
			kv[k] = v
		}
	}
	if _, ok := kv["THROUGHPUT"]; !ok {
		return nil, fmt.Errorf("parse netperf output: no THROUGHPUT in %q", firstLines(out, 3))
	}
	return kv, nil
}

// sample turns netperf's keys into the workload's metrics, checking the units.
func (n Netperf) sample(kv map[string]string) (Sample, error) {
	wantTput, wantSD := "Trans/s", "usec/Tran"
	if n.isStream() {
		wantTput, wantSD = "10^6bits/s", "usec/KB"
	}
	if u := kv["THROUGHPUT_UNITS"]; u != wantTput {
		return nil, fmt.Errorf("parse netperf %s output: throughput in %q, want %q", n.Test, u, wantTput)
	}
	s := Sample{}
	primary := MetricRate
	if n.isStream() {
		primary = MetricThroughput
	}
	if err := s.setFrom(kv, primary, "THROUGHPUT"); err != nil {
		return nil, err
	}
	if kv["SD_UNITS"] == wantSD {
		s.setOptional(kv, MetricSDClient, "LOCAL_SD")
		s.setOptional(kv, MetricSDServer, "REMOTE_SD")
	}
	if !n.isStream() {
		s.setOptional(kv, MetricP50, "P50_LATENCY")
		s.setOptional(kv, MetricP90, "P90_LATENCY")
		s.setOptional(kv, MetricP99, "P99_LATENCY")
		s.setOptional(kv, MetricMeanLatency, "MEAN_LATENCY")
	}
	return s, nil
}

// setFrom sets metric from a required key.
func (s Sample) setFrom(kv map[string]string, metric, key string) error {
	v, err := strconv.ParseFloat(kv[key], 64)
	if err != nil {
		return fmt.Errorf("parse netperf %s=%q: %w", key, kv[key], err)
	}
	s[metric] = v
	return nil
}

// setOptional sets metric from key when netperf reported a real value (it prints -1 or
// nothing for figures it could not measure).
func (s Sample) setOptional(kv map[string]string, metric, key string) {
	if v, err := strconv.ParseFloat(kv[key], 64); err == nil && v >= 0 {
		s[metric] = v
	}
}

// units is what the run did, the denominator of its CPU figures: transactions, or KB
// moved for a stream; 0 when netperf's elapsed time is unusable.
func (n Netperf) units(s Sample, elapsed string) float64 {
	secs, err := strconv.ParseFloat(elapsed, 64)
	if err != nil || secs <= 0 {
		return 0
	}
	if n.isStream() {
		return s[MetricThroughput] * 1e6 / 8 / 1024 * secs
	}
	return s[MetricRate] * secs
}

// toolGrace is how much longer than its requested duration a tool may run (connection
// setup, result exchange) before it is killed.
const toolGrace = 20 * time.Second

// seconds rounds a duration up to whole seconds, at least 1: what -l and -t take.
func seconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// toolMessage is the last line a failed tool printed: netperf reports errors on stdout.
func toolMessage(stdout, stderr string) string {
	if m := logtail.Last(stderr); m != "" {
		return m
	}
	return logtail.Last(stdout)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
