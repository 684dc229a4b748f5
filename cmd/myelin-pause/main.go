// Command myelin-pause is the pause process of the locally built pause image
// (myelin/pause:<version>), the sandbox container containerd starts for every pod: it
// holds the pod's namespaces, reaps children it inherits, and exits 0 on SIGTERM or
// SIGINT. It must stay tiny and static: it imports nothing but the runtime's basics.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child, so orphans re-parented to the pod's PID 1 never
// stay zombies.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
