package bench

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/myelin-net/myelin/internal/testenv"
)

// TestPrivilegedBPFMeter runs a socket filter 100 times with the statistics on and
// checks that the meter counts those runs and their time.
func TestPrivilegedBPFMeter(t *testing.T) {
	testenv.RequireRoot(t, "load a BPF program and turn on BPF statistics")
	stats, err := enableBPFStats()
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "myelin_bench_t", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	m, err := startBPFMeter(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 100}); err != nil {
		t.Fatal(err)
	}
	s := Sample{}
	if err := m.addTo(s, 10); err != nil {
		t.Fatal(err)
	}
	// Other programs on the machine may run too: at least ours.
	if s[MetricBPFRuns] < 10 {
		t.Errorf("bpf_runs = %v per transaction over 10 transactions, want at least the test program's 100 runs / 10", s[MetricBPFRuns])
	}
	if s[MetricBPFTime] <= 0 {
		t.Errorf("bpf_ns = %v, want the test program's run time", s[MetricBPFTime])
	}
	// By name (programs with BTF, as myelin's, have their full name; this one has 14
	// characters, all the kernel keeps without BTF is 15).
	if own := s[ProgramMetric("myelin_bench_t")]; own <= 0 || own > s[MetricBPFTime] {
		t.Errorf("bpf_ns:myelin_bench_t = %v, want the test program's run time, within bpf_ns %v (sample %v)", own, s[MetricBPFTime], s)
	}
	if v, ok := s[MetricAgentCPU]; !ok || v < 0 {
		t.Errorf("agent_us = %v (set: %v), want the agents' CPU time per transaction, 0 or more", v, ok)
	}
	if off, err := startBPFMeter(false); off != nil || err != nil {
		t.Errorf("startBPFMeter(false) = %v, %v; want no meter", off, err)
	}
}

// TestProcessRunTime: the schedstat reading of this test's own process grows while
// it computes.
func TestProcessRunTime(t *testing.T) {
	before, err := processRunTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 50_000_000 {
		x ^= i * i
	}
	after, err := processRunTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("run time %v s after computing (%d), %v s before: want more", after, x, before)
	}
}

// TestAgentsCPUSince: agents that exit between the readings (a test stopping its
// agent while a bench case runs) lower the figure, never make it negative; one that
// started in between counts whole.
func TestAgentsCPUSince(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end map[int]float64
		want       float64
	}{
		{"the same agents", map[int]float64{10: 1, 20: 2}, map[int]float64{10: 1.5, 20: 2.25}, 0.75},
		{"one exited", map[int]float64{10: 1, 20: 50}, map[int]float64{10: 1.5}, 0.5},
		{"one started", map[int]float64{10: 1}, map[int]float64{10: 1.5, 30: 0.25}, 0.75},
		{"threads exited", map[int]float64{10: 3}, map[int]float64{10: 2}, 0},
		{"none", nil, nil, 0},
	} {
		if got := agentsCPUSince(tc.start, tc.end); got != tc.want {
			t.Errorf("%s: agentsCPUSince(%v, %v) = %v, want %v", tc.name, tc.start, tc.end, got, tc.want)
		}
	}
}
