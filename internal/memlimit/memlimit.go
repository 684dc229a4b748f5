package memlimit

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Setting is the memory-limit key: Auto, Off or a soft limit in bytes.
type Setting struct {
	bytes int64 // > 0: that limit
	off   bool
}

// Auto and Off are the key's two words; Bytes makes a fixed limit.
var (
	Auto = Setting{}
	Off  = Setting{off: true}
)

// Bytes is a fixed soft limit of n bytes.
func Bytes(n int64) Setting { return Setting{bytes: n} }

// The bounds of a fixed limit: below 32 MiB the agent's own runtime does not fit
// (it idles at ~30 MiB of Go memory), and the GC would run without pause.
const (
	minBytes = 32 << 20
	maxBytes = 1 << 40
)

// Floor is the least heap goal auto keeps without a cgroup limit, and cgroupShare
// the part of a cgroup limit auto sets (the rest is headroom for what the Go runtime
// does not count: the binary's pages, cgo-free kernel buffers). The floor was a 64 MiB
// soft limit, which counts all of the runtime's memory; as a heap goal, which counts
// the heap alone, it decides the RSS of a small agent and of one with 10,000 Services
// (live heap ~23 MB, under floor/1.5): 48 MiB gave 80 MiB RSS there, 40 MiB 76-77 at
// the same time to ready (docs/scale.md, "Memory with 10,000 Services").
const (
	Floor       = 40 << 20
	cgroupShare = 0.9
)

// Parse reads the memory-limit key: "auto", "off", or a size such as 96Mi or 1Gi.
func Parse(v string) (Setting, error) {
	switch v {
	case "auto":
		return Auto, nil
	case "off":
		return Off, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Value() < minBytes || q.Value() > maxBytes {
		return Setting{}, fmt.Errorf("must be auto, off, or a size between 32Mi and 1Ti such as 96Mi or 1Gi (the agent's soft memory limit, GOMEMLIMIT)")
	}
	return Bytes(q.Value()), nil
}

// Decision is the soft limit the agent runs with and why.
type Decision struct {
	Limit int64 // bytes; math.MaxInt64: none
	// Follow: the limit tracks the live heap (Apply keeps it at
	// max(Limit, 1.5 x live heap)), auto without a cgroup limit.
	Follow bool
	Reason string
}

// Decide picks the soft limit for s, given the agent's cgroup memory limit
// (cgroupMax, 0 when none) and the GOMEMLIMIT environment variable (env, "" when
// unset). A fixed setting wins over the environment; auto leaves an explicit
// GOMEMLIMIT alone, else takes 90% of the cgroup limit, else a limit that follows the
// live heap, never below Floor.
func Decide(s Setting, cgroupMax int64, env string) Decision {
	switch {
	case s.off:
		return Decision{Limit: math.MaxInt64, Reason: "memory-limit off"}
	case s.bytes > 0:
		return Decision{Limit: s.bytes, Reason: "memory-limit " + resource.NewQuantity(s.bytes, resource.BinarySI).String()}
	case env != "":
		return Decision{Limit: -1, Reason: "GOMEMLIMIT=" + env + " from the environment"}
	case cgroupMax > 0:
		return Decision{Limit: int64(float64(cgroupMax) * cgroupShare),
			Reason: fmt.Sprintf("90%% of the cgroup's memory.max (%s)", resource.NewQuantity(cgroupMax, resource.BinarySI))}
	}
	return Decision{Limit: math.MaxInt64, Follow: true,
		Reason: "auto: no soft limit (no cgroup memory limit); the heap goal follows the live heap (1.5 x it, at least " +
			resource.NewQuantity(Floor, resource.BinarySI).String() + ")"}
}

// followPercent is the GC percent (GOGC) that puts the heap goal at
// max(floor, 1.5 x live) for a live heap of live bytes.
func followPercent(floor, live int64) int {
	if live <= 0 {
		return 100 // the runtime's default until a cycle has measured the heap
	}
	return int(max(50, (floor-live)*100/live))
}

// Apply sets the soft limit for s and, when the decision follows the live heap, keeps
// the GC's heap goal at 1.5x it after every garbage collection. It returns the
// decision, for the log.
func Apply(s Setting, log *slog.Logger) Decision {
	cg, err := cgroupMax()
	if err != nil {
		log.Debug("no cgroup memory limit read", "err", err)
	}
	d := Decide(s, cg, os.Getenv("GOMEMLIMIT"))
	if d.Limit < 0 {
		return d // the runtime applied GOMEMLIMIT itself
	}
	debug.SetMemoryLimit(d.Limit)
	if d.Follow {
		if g := os.Getenv("GOGC"); g != "" {
			d.Follow = false
			d.Reason += "; not followed: GOGC=" + g + " from the environment sets the heap goal"
		} else {
			followHeap(Floor)
		}
	}
	return d
}

// sentinel is allocated to learn, through its finalizer, that a GC cycle ended. It
// holds a pointer so that it is never a tiny allocation (whose finalizers may not run).
type sentinel struct{ _ *int }

// followHeap sets the GC percent after every GC cycle to followPercent(floor, live
// heap), so the heap grows to 1.5x its live data (at least to floor) before the next
// cycle. It used to set the soft memory limit to that figure instead, but the limit
// counts all of the runtime's memory (partly used spans, stacks, metadata), which at
// 50,000 pods was more than 1.5x the live heap: the GC then ran back to back, ~12
// cycles a second and 88% of a vCPU in an idle agent (docs/scale.md). A heap goal
// only ever waits for the program to allocate half its live heap again.
func followHeap(floor int64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	percent := 100
	var arm func()
	arm = func() {
		runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := followPercent(floor, int64(sample[0].Value.Uint64())); p != percent {
					debug.SetGCPercent(p)
					percent = p
				}
			}
			arm()
		})
	}
	arm()
}

// cgroupRoot is where the cgroup v2 hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMax returns the memory limit of the agent's cgroup v2 (the tightest of its
// cgroup and its ancestors), 0 when there is none.
func cgroupMax() (int64, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, err
	}
	return tightestLimit(cgroupRoot, string(b), func(p string) ([]byte, error) { return os.ReadFile(p) })
}

// tightestLimit reads memory.max from the cgroup /proc/self/cgroup (self) names and
// from each of its ancestors below root, and returns the smallest, 0 when none is set.
func tightestLimit(root, self string, read func(string) ([]byte, error)) (int64, error) {
	var path string
	for _, line := range strings.Split(self, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return 0, fmt.Errorf("no cgroup v2 entry in /proc/self/cgroup")
	}
	var limit int64
	for dir := filepath.Clean("/" + path); ; dir = filepath.Dir(dir) {
		if b, err := read(filepath.Join(root, dir, "memory.max")); err == nil {
			v := strings.TrimSpace(string(b))
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		}
		if dir == "/" {
			return limit, nil
		}
	}
}
