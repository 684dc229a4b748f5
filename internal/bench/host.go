package bench

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// NetNSHost is a Host in the network namespace mounted at Path (for example
// /run/netns/myelin-bench-lo or a lab pod's namespace). It enters the namespace with
// nsenter and pins with taskset; both exec in place, so the process is the tool itself.
type NetNSHost struct {
	Path string
	// Cgroup, when set, is the cgroup v2 directory the tool runs in (created if
	// missing): a lab node's, so that what is attached there (socket-LB) serves it as
	// it serves the node's pods. Empty: the bench's own cgroup.
	Cgroup string
}

// Command implements Host.
func (h NetNSHost) Command(ctx context.Context, cpu int, argv ...string) *exec.Cmd {
	full := append([]string{"nsenter", "--net=" + h.Path}, pinned(cpu, argv)...)
	if h.Cgroup != "" {
		// The shell moves itself into the cgroup and execs the tool in place.
		full = append([]string{"sh", "-c", `mkdir -p "$0" && echo $$ > "$0/cgroup.procs" && exec "$@"`, h.Cgroup}, full...)
	}
	return command(ctx, full)
}

// pinned prefixes argv with taskset when cpu is a vCPU number.
func pinned(cpu int, argv []string) []string {
	if cpu < 0 {
		return argv
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// command builds a command that is killed when ctx is done and, through the parent-death
// signal, when the bench process dies, so no load generator outlives a crashed run.
func command(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	return cmd
}
