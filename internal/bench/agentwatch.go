package bench

// Watching the bench lab's agent process: its PID, CPU time and memory from /proc.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
)

// agentPID finds the myelin-agent process of a node of the bench's lab.
func agentPID(node string) (int, error) {
	pid, err := labdriver.ProcessPID(labplan.Paths{Dir: labplan.DefaultDir}, myelin.AgentProcess(node))
	if err == nil && pid == 0 {
		err = fmt.Errorf("the myelin agent of %s is not running", node)
	}
	return pid, err
}

// procUsage is a process's CPU seconds (user + system) and resident memory: all of
// it (RSS, which counts the pages of the binary it ran) and its anonymous part (the
// heap, stacks and runtime's memory).
type procUsage struct {
	cpu  float64
	rss  float64 // MiB
	anon float64 // MiB (RssAnon)
	hwm  float64 // MiB (VmHWM: the peak RSS since the process started)
}

func readUsage(pid int) (procUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, err
	}
	// Fields after the command name in parentheses; utime and stime are 14 and 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if len(f) < 13 {
		return procUsage{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	u := procUsage{cpu: (ut + st) / userHZ}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch name {
		case "VmRSS":
			u.rss = kb / 1024
		case "RssAnon":
			u.anon = kb / 1024
		case "VmHWM":
			u.hwm = kb / 1024
		}
	}
	return u, nil
}

// watchAgent samples the agent's usage every 200 ms until stop is closed and returns
// the CPU seconds it used and its peak RSS.
func watchAgent(pid int, stop <-chan struct{}) (cpu, peakRSS float64, err error) {
	cpu, peak, err := watchAgentMemory(pid, stop)
	return cpu, peak.rss, err
}

// startWatchAgent runs watchAgent in its own goroutine; the function it returns
// stops the watch and returns what watchAgent measured.
func startWatchAgent(pid int) (end func() (cpu, peakRSS float64, err error)) {
	stop := make(chan struct{})
	type usage struct {
		cpu, rss float64
		err      error
	}
	done := make(chan usage, 1)
	go func() {
		cpu, rss, err := watchAgent(pid, stop)
		done <- usage{cpu, rss, err}
	}()
	return func() (float64, float64, error) {
		close(stop)
		u := <-done
		return u.cpu, u.rss, u.err
	}
}

// watchAgentMemory is watchAgent that also returns the peak of the anonymous memory
// (peak.rss and peak.anon are each their own maximum; peak.cpu is unset).
func watchAgentMemory(pid int, stop <-chan struct{}) (cpu float64, peak procUsage, err error) {
	first, err := readUsage(pid)
	if err != nil {
		return 0, procUsage{}, err
	}
	peak = procUsage{rss: first.rss, anon: first.anon}
	for {
		select {
		case <-stop:
			u, err := readUsage(pid)
			if err != nil {
				return 0, procUsage{}, fmt.Errorf("the agent (pid %d) went away while measured: %w", pid, err)
			}
			return u.cpu - first.cpu, procUsage{rss: max(peak.rss, u.rss), anon: max(peak.anon, u.anon)}, nil
		case <-time.After(200 * time.Millisecond):
		}
		if u, err := readUsage(pid); err == nil {
			peak.rss, peak.anon = max(peak.rss, u.rss), max(peak.anon, u.anon)
		}
	}
}
