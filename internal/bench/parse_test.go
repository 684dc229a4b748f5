package bench

import (
	"errors"
	"maps"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The testdata files are real netperf 2.7.0 and iperf 3.12 outputs captured over a veth
// pair on the development VM.
func TestNetperfSample(t *testing.T) {
	for _, tc := range []struct {
		file string
		w    Netperf
		want Sample
	}{
		{"netperf-tcp-rr.txt", Netperf{Test: TestTCPRR}, Sample{MetricRate: 26462.27, MetricP50: 26, MetricP90: 30,
			MetricP99: 135, MetricMeanLatency: 37.69, MetricSDClient: 50.114, MetricSDServer: 50.114}},
		{"netperf-tcp-crr.txt", Netperf{Test: TestTCPCRR}, Sample{MetricRate: 5004.51, MetricP50: 51, MetricP90: 81,
			MetricP99: 4057, MetricMeanLatency: 198.10, MetricSDClient: 397.600, MetricSDServer: 1995.880}},
		{"netperf-tcp-stream.txt", Netperf{Test: TestTCPStream}, Sample{MetricThroughput: 5328.05,
			MetricSDClient: 3.060, MetricSDServer: 3.060}},
	} {
		t.Run(tc.w.Name(), func(t *testing.T) {
			kv, err := ParseNetperfKeyval(readTestdata(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.w.sample(kv)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSample(got, tc.want) {
				t.Errorf("sample = %v, want %v", got, tc.want)
			}
			// Every figure a sample carries is one of the workload's metrics.
			for k := range got {
				if !slices.ContainsFunc(tc.w.Metrics(), func(m Metric) bool { return m.Name == k }) {
					t.Errorf("sample has %q, which is not among the workload's metrics", k)
				}
			}
		})
	}
}

func TestNetperfSampleRejectsWrongUnits(t *testing.T) {
	kv, err := ParseNetperfKeyval(readTestdata(t, "netperf-tcp-stream.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Netperf{Test: TestTCPRR}).sample(kv); err == nil {
		t.Error("TCP_RR accepted a stream's output (Mbit/s)")
	}
}

func TestParseNetperfKeyvalErrors(t *testing.T) {
	// What netperf prints (on stdout) when no netserver listens.
	out := "establish control: are you sure there is a netserver listening on 198.19.255.2 at port 9?\n"
	if _, err := ParseNetperfKeyval(out); err == nil {
		t.Error("no error for output without THROUGHPUT")
	}
}

func TestNetperfSampleSkipsUnmeasured(t *testing.T) {
	kv := map[string]string{"THROUGHPUT": "100", "THROUGHPUT_UNITS": "Trans/s", "P50_LATENCY": "-1",
		"LOCAL_SD": "-1.000", "SD_UNITS": "usec/Tran"}
	got, err := (Netperf{Test: TestTCPRR}).sample(kv)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSample(got, Sample{MetricRate: 100}) {
		t.Errorf("sample = %v, want only the rate", got)
	}
}

func TestNetperfArgv(t *testing.T) {
	tr := Trial{Server: Target{Addr: netip.MustParseAddr("198.19.200.2"), Port: 12866},
		Placement: CrossVCPU, Duration: 1500 * time.Millisecond}
	got := strings.Join(Netperf{Test: TestTCPRR}.Argv(tr), " ")
	for _, want := range []string{"-H 198.19.200.2 -p 12866", "-t TCP_RR", "-l 2", "-c -C", "-T 0,1", "-- -r 1,1 -k THROUGHPUT,"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
	tr.Transactions = 30000
	if got := strings.Join(Netperf{Test: TestTCPRR}.Argv(tr), " "); !strings.Contains(got, "-l 2") {
		t.Errorf("TCP_RR argv %q: want a timed run whatever the count", got)
	}
	if got := strings.Join(Netperf{Test: TestTCPCRR}.Argv(tr), " "); !strings.Contains(got, "-l -30000") {
		t.Errorf("TCP_CRR argv %q: want a run of 30000 transactions (-l -30000)", got)
	}
	tr.Placement = Unpinned
	if got := strings.Join(Netperf{Test: TestTCPStream}.Argv(tr), " "); strings.Contains(got, "-T") || strings.Contains(got, "-r 1,1") {
		t.Errorf("unpinned stream argv %q pins or sets a request size", got)
	}
}

func TestNetperfUnits(t *testing.T) {
	s := Sample{MetricRate: 1000}
	if got := TCPRR().(Netperf).units(s, "2.00"); math.Abs(got-2000) > 1e-9 {
		t.Errorf("TCP_RR units = %v, want 2000 transactions", got)
	}
	s = Sample{MetricThroughput: 8 * 1024 / 1e6 * 1000} // 1000 KB/s
	if got := TCPStream().(Netperf).units(s, "1.00"); math.Abs(got-1000) > 1e-9 {
		t.Errorf("TCP_STREAM units = %v, want 1000 KB", got)
	}
	if got := TCPRR().(Netperf).units(Sample{MetricRate: 1000}, "-1"); got != 0 {
		t.Errorf("units with an unusable elapsed time = %v, want 0", got)
	}
}

func TestBPFTotalsSince(t *testing.T) {
	pt := func(name string, ns, runs uint64) progTotals {
		return progTotals{name: name, stats: ebpf.ProgramStats{Runtime: time.Duration(ns), RunCount: runs}}
	}
	before := bpfTotals{
		1: pt("myelin_from_pod", 100, 10),
		2: pt("myelin_to_pod", 500, 50),     // unloaded during the run: lost
		3: pt("myelin_to_pod", 900, 90),     // ID reused by a newer program
		5: pt("myelin_from_pod", 10, 1),     // another node's instance
		6: pt("myelin_sock_connect4", 5, 1), // did not run
	}
	after := bpfTotals{
		1: pt("myelin_from_pod", 400, 13),
		3: pt("myelin_to_pod", 20, 2),
		4: pt("", 80, 8), // loaded during the run, no name
		5: pt("myelin_from_pod", 60, 2),
		6: pt("myelin_sock_connect4", 5, 1),
	}
	ns, runs, byName := after.since(before)
	if ns != 300+20+80+50 || runs != 3+2+8+1 {
		t.Errorf("since = %v ns, %v runs; want 450 ns, 14 runs", ns, runs)
	}
	want := map[string]float64{"myelin_from_pod": 350, "myelin_to_pod": 20, "(unnamed)": 80}
	if !maps.Equal(byName, want) {
		t.Errorf("by program = %v, want %v", byName, want)
	}
}

func TestParseIperf3UDP(t *testing.T) {
	r, err := ParseIperf3UDP([]byte(readTestdata(t, "iperf3-udp.json")))
	if err != nil {
		t.Fatal(err)
	}
	if r.Packets != 17217 || r.LostPackets != 568 || math.Abs(r.LostPercent-3.29906487773712) > 1e-9 ||
		math.Abs(r.BitsPerSecond-192713048.81326735) > 1e-3 || r.JitterMs <= 0 {
		t.Errorf("parsed %+v, want the receiver's summary (17217 packets, 568 lost)", r)
	}
}

func TestParseIperf3UDPError(t *testing.T) {
	_, err := ParseIperf3UDP([]byte(readTestdata(t, "iperf3-refused.json")))
	if err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("error = %v, want iperf3's own message", err)
	}
	if _, err := ParseIperf3UDP([]byte("not json")); err == nil {
		t.Error("no error for output that is not JSON")
	}
}

func TestParseCPUStat(t *testing.T) {
	before, err := ParseCPUStat(strings.NewReader(readTestdata(t, "proc-stat-before.txt")))
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseCPUStat(strings.NewReader(readTestdata(t, "proc-stat-after.txt")))
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	// user +188, system +15, idle +0 jiffies: 1 s of a 2-vCPU machine busy compiling.
	if math.Abs(d.Busy-2.03) > 1e-9 || d.Idle != 0 {
		t.Errorf("delta = %+v, want busy 2.03 s, idle 0 s", d)
	}
	if _, err := ParseCPUStat(strings.NewReader("intr 1 2 3\n")); err == nil {
		t.Error("no error without a cpu line")
	}
	if _, err := ReadCPUStat(); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
}

func sameSample(a, b Sample) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-9 {
			return false
		}
	}
	return true
}

// The agent's Go memory figures come from its metrics endpoint (go_memstats_*_bytes,
// in MiB by short name); svc-program reads heap_inuse and next_gc, myelin scale all of
// them. Other samples and comments are left out, not misread.
func TestParseGoMemstats(t *testing.T) {
	text := `# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 3.670016e+07
go_memstats_next_gc_bytes 5.0331648e+07
go_memstats_alloc_bytes_total 1.15510680e+08
go_goroutines 42
myelin_endpoints 3
`
	got, err := parseGoMemstats(text)
	if err != nil {
		t.Fatal(err)
	}
	if got["heap_inuse"] != 35 || got["next_gc"] != 48 || len(got) != 2 {
		t.Errorf("parseGoMemstats = %v, want heap_inuse 35 and next_gc 48 (MiB), nothing else", got)
	}
	if _, err := parseGoMemstats("go_goroutines 42\n"); err == nil {
		t.Error("metrics without go_memstats_heap_inuse_bytes parsed without an error")
	}
}
