package sysdump

import (
	"os"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// LocalSocket is the agent socket of the node this runs on: $MYELIN_STATE_DIR's (the
// chart sets it in the agent's container), else the default.
func LocalSocket() string {
	if dir := os.Getenv("MYELIN_STATE_DIR"); dir != "" {
		return api.Socket(dir)
	}
	return api.DefaultSocket
}

// LocalPinDir is the agent's pin directory when this runs in the agent's container:
// the --bpffs-dir of the container's first process (myelin-agent), else the default.
func LocalPinDir() string {
	b, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return nodelayout.BPFFSDir
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--bpffs-dir="); ok {
			return v
		}
		if a == "--bpffs-dir" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return nodelayout.BPFFSDir
}
