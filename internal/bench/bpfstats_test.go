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
