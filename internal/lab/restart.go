package lab

import (
	"fmt"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Restart stops one supervised process (SIGTERM, or SIGKILL with kill) and waits until
// the supervisor has started it again, e.g. to make an agent read a changed
// configuration. It holds the lab's lock (lock.go) while it runs, and fails at once
// with ErrBusy while another lab up, down or restart holds it.
func Restart(paths labplan.Paths, name string, kill bool) error {
	if !Running(paths) {
		return ErrNoLab
	}
	l, err := lockLab(paths)
	if err != nil {
		return err
	}
	defer l.release(false)
	if !Running(paths) { // stopped meanwhile by a down that held the lock
		return ErrNoLab
	}
	pid := 0
	st, err := LoadState(paths)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range st.Processes {
		names = append(names, p.Name)
		if p.Name == name && p.Running {
			pid = p.PID
		}
	}
	if pid == 0 {
		return fmt.Errorf("no running lab process %q; the lab runs: %v", name, names)
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		st, err := LoadState(paths)
		if err != nil {
			continue
		}
		for _, p := range st.Processes {
			if p.Name == name && p.Running && p.PID != pid {
				return nil
			}
		}
	}
	return fmt.Errorf("%s was not restarted within 2 minutes; see %s", name, paths.Log(name))
}
