package api

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// BootTime is a moment of the machine's CLOCK_BOOTTIME and the boot it belongs to.
// Unlike the wall clock it never steps (NTP, an operator setting the date), so the
// moments two processes took compare: the plugin's recorded delete and the agent's
// allocation (endpoint.Manager.DeleteRecorded). Every process shares it outside a
// time namespace, and Kubernetes gives containers none.
type BootTime struct {
	Boot  string `json:"boot,omitempty"`  // /proc/sys/kernel/random/boot_id
	Nanos int64  `json:"nanos,omitempty"` // CLOCK_BOOTTIME
}

// BootNow returns the present moment; the zero BootTime (unknown: callers fall back
// to the wall clock) when the clock or the boot id can't be read.
func BootNow() BootTime {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return BootTime{}
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return BootTime{}
	}
	return BootTime{Boot: strings.TrimSpace(string(b)), Nanos: ts.Nano()}
}

// Known reports whether b was read (BootNow did not fail, or a record has it).
func (b BootTime) Known() bool { return b.Boot != "" }
