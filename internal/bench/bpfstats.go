package bench

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Metric names of the BPF statistics (--bpf-stats).
const (
	MetricBPFTime  = "bpf_ns"
	MetricBPFRuns  = "bpf_runs"
	MetricAgentCPU = "agent_us"
)

// bpfMetrics are the figures --bpf-stats adds to a netperf sample, per unit ("trans",
// or "KB" for a stream) named in full by per ("transaction").
func bpfMetrics(unit, per string) []Metric {
	return []Metric{
		{Name: MetricBPFTime, Unit: "ns/" + unit, Description: "run time of every BPF program on the machine per " + per + ", from the kernel's BPF statistics (--bpf-stats only; bpf_ns:<program> is one program's, its instances summed)"},
		{Name: MetricBPFRuns, Unit: "runs/" + unit, Description: "BPF program runs on the machine per " + per + " (--bpf-stats only)"},
		{Name: MetricAgentCPU, Unit: "µs/" + unit, Description: "CPU time of every myelin-agent process on the machine per " + per + ", from each thread's /proc schedstat run time (--bpf-stats only)"},
	}
}

// enableBPFStats turns on the kernel's BPF run-time statistics until the returned
// Closer is closed (or the process exits): BPF_ENABLE_STATS holds them on through a
// file descriptor, so the machine's kernel.bpf_stats_enabled setting is never touched
// and nothing is left on after a crash. While on, every BPF program run reads the
// clock twice, which slows every case using BPF alike: compare BPF figures between
// cases of one --bpf-stats run, and rates from runs without it.
func enableBPFStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return nil, fmt.Errorf("--bpf-stats: turn on the kernel's BPF statistics: %w (needs root and Linux 5.8 or later; run without --bpf-stats)", err)
	}
	return c, nil
}

// bpfTotals is the name, run time and run count of every BPF program loaded, by ID.
type bpfTotals map[ebpf.ProgramID]progTotals

type progTotals struct {
	name  string
	stats ebpf.ProgramStats
}

// readBPFTotals reads the statistics of every BPF program on the machine. Programs
// that go away while it reads are skipped.
func readBPFTotals() (bpfTotals, error) {
	t := bpfTotals{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return t, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list BPF programs: %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // unloaded since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("open BPF program %d: %w", id, err)
		}
		pt, err := readProgTotals(p)
		p.Close()
		if err != nil {
			return nil, fmt.Errorf("read BPF program %d's statistics: %w", id, err)
		}
		t[id] = pt
	}
}

// readProgTotals reads p's statistics and its name (in full, from its BTF, where the
// kernel's is cut at 15 characters; "" when it has none).
func readProgTotals(p *ebpf.Program) (progTotals, error) {
	s, err := p.Stats()
	if err != nil {
		return progTotals{}, err
	}
	pt := progTotals{stats: *s}
	if info, err := p.Info(); err == nil {
		pt.name = info.Name
	}
	return pt, nil
}

// since is what every program ran between before and t, in total and by program
// name (the instances of one program summed: a lab's nodes each load the datapath):
// a program loaded in between counts from zero; one unloaded in between is lost (the
// bench does not replace programs while a case runs).
func (t bpfTotals) since(before bpfTotals) (runTimeNs float64, runs float64, byName map[string]float64) {
	byName = map[string]float64{}
	for id, pt := range t {
		s, b := pt.stats, before[id].stats
		if s.RunCount < b.RunCount || s.Runtime < b.Runtime || before[id].name != pt.name {
			b = ebpf.ProgramStats{} // an ID reused by a newer program
		}
		runTimeNs += float64(s.Runtime - b.Runtime)
		runs += float64(s.RunCount - b.RunCount)
		if s.RunCount > b.RunCount {
			byName[progName(pt.name)] += float64(s.Runtime - b.Runtime)
		}
	}
	return runTimeNs, runs, byName
}

func progName(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return name
}

// ProgramMetric is the sample key of one BPF program's run time per unit under
// --bpf-stats: "bpf_ns:<program name>".
func ProgramMetric(program string) string { return MetricBPFTime + ":" + program }

// programMetrics are the per-program keys (ProgramMetric) found in any of rounds,
// sorted.
func programMetrics(rounds map[int]Sample) []string {
	seen := map[string]bool{}
	for _, s := range rounds {
		for k := range s {
			if strings.HasPrefix(k, ProgramMetric("")) {
				seen[k] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// bpfMeter measures the BPF run time of one run, and the agents' CPU time (the
// datapath's cost outside BPF: flow records, policy and Service changes); a nil meter
// measures nothing.
type bpfMeter struct {
	start      bpfTotals
	agentStart map[int]float64
}

// startBPFMeter starts measuring when on (statistics enabled for the run).
func startBPFMeter(on bool) (*bpfMeter, error) {
	if !on {
		return nil, nil
	}
	t, err := readBPFTotals()
	if err != nil {
		return nil, err
	}
	return &bpfMeter{start: t, agentStart: agentsCPU()}, nil
}

// addTo adds the BPF figures per transaction to s, from transactions done in the run.
func (m *bpfMeter) addTo(s Sample, transactions float64) error {
	if m == nil || transactions <= 0 {
		return nil
	}
	end, err := readBPFTotals()
	if err != nil {
		return err
	}
	ns, runs, byName := end.since(m.start)
	s[MetricBPFTime] = ns / transactions
	s[MetricBPFRuns] = runs / transactions
	for name, ns := range byName {
		s[ProgramMetric(name)] = ns / transactions
	}
	s[MetricAgentCPU] = agentsCPUSince(m.agentStart, agentsCPU()) * 1e6 / transactions
	return nil
}

// agentsCPU is the CPU seconds of each myelin-agent process on the machine, by pid.
func agentsCPU() map[int]float64 {
	dirs, _ := os.ReadDir("/proc")
	total := map[int]float64{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "myelin-agent" {
			continue
		}
		if cpu, err := processRunTime(pid); err == nil {
			total[pid] = cpu
		} else if u, err := readUsage(pid); err == nil {
			total[pid] = u.cpu
		}
	}
	return total
}

// agentsCPUSince is the CPU seconds the agents spent between two agentsCPU readings:
// per pid, so that an agent exiting in between (another agent's test, a restart) makes
// the figure low, never negative; an agent that started in between counts whole, and a
// pid's threads that exited take their time with them (its difference counts as 0).
func agentsCPUSince(start, end map[int]float64) float64 {
	spent := 0.0
	for pid, cpu := range end {
		spent += max(cpu-start[pid], 0)
	}
	return spent
}

// processRunTime is the seconds pid's threads have spent on a CPU, summed from
// /proc/<pid>/task/*/schedstat (nanoseconds): /proc/<pid>/stat counts in 10 ms ticks,
// which over a 3 s run is as coarse as what a busy agent spends (a thread that exits
// between two readings takes its time with it).
func processRunTime(pid int) (float64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var ns float64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("empty /proc/%d/task/%s/schedstat", pid, t.Name())
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %w", pid, t.Name(), err)
		}
		ns += v
	}
	return ns / 1e9, nil
}
