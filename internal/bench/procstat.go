package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of /proc/stat times (USER_HZ, 100 on every Linux architecture
// myelin runs on).
const userHZ = 100

// CPUStat is the machine-wide CPU time from the "cpu" line of /proc/stat, in seconds.
type CPUStat struct {
	Busy, Idle float64
}

// ReadCPUStat reads /proc/stat.
func ReadCPUStat() (CPUStat, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return CPUStat{}, fmt.Errorf("read cpu times: %w", err)
	}
	defer f.Close()
	return ParseCPUStat(f)
}

// ParseCPUStat parses the aggregate "cpu" line of /proc/stat. Idle counts idle and
// iowait; everything else (user, nice, system, irq, softirq, steal) is busy. guest and
// guest_nice are already inside user and nice, so they are not added again.
func ParseCPUStat(r io.Reader) (CPUStat, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]float64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return CPUStat{}, fmt.Errorf("parse /proc/stat cpu line %q: %w", sc.Text(), err)
			}
			v[i] = float64(n) / userHZ
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		return CPUStat{Busy: user + nice + system + irq + softirq + steal, Idle: idle + iowait}, nil
	}
	return CPUStat{}, fmt.Errorf("parse /proc/stat: no aggregate cpu line")
}

// Sub returns the CPU time spent between before and s.
func (s CPUStat) Sub(before CPUStat) CPUStat {
	return CPUStat{Busy: s.Busy - before.Busy, Idle: s.Idle - before.Idle}
}

// cpuMeter measures the machine's busy CPU seconds around a run. The figure includes
// everything else the machine runs at the time, which is why cases are interleaved.
type cpuMeter struct {
	start CPUStat
	err   error
}

func startCPUMeter() *cpuMeter {
	s, err := ReadCPUStat()
	return &cpuMeter{start: s, err: err}
}

// busySeconds returns the busy vCPU-seconds since the meter started.
func (m *cpuMeter) busySeconds() (float64, bool) {
	if m.err != nil {
		return 0, false
	}
	end, err := ReadCPUStat()
	if err != nil {
		return 0, false
	}
	return end.Sub(m.start).Busy, true
}

// processAge returns how long process pid has run, in seconds (10 ms resolution): the
// system's uptime minus the process's start time (/proc/<pid>/stat field 22).
func processAge(pid int) (float64, error) {
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	started, err1 := strconv.ParseFloat(f[19], 64)
	now, err2 := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("process %d age: %w", pid, err)
	}
	return now - started/userHZ, nil
}
