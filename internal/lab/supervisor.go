package lab

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/logtail"
)

// Timeouts of the supervisor. Generous: the first apiserver start on 2 busy cores is slow.
const (
	processReadyTimeout = 2 * time.Minute
	nodesReadyTimeout   = 2 * time.Minute
	stopGrace           = 10 * time.Second
	maxRestartBackoff   = 30 * time.Second
)

// Supervise starts the lab's processes in order, waits for each to be ready, restarts
// any that exit (with backoff), and stops them all when ctx ends. It reports progress in
// the state file, which `lab up` and `lab status` read.
func Supervise(ctx context.Context, paths labplan.Paths) error {
	plan, err := LoadPlan(paths)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.WriteFile(paths.SupervisorPID(), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &supervisor{paths: paths, state: State{Phase: PhaseStarting}}
	s.write()
	defer func() {
		cancel() // no restarts from here on
		s.stopAll()
	}()

	rt := RuntimeOf(plan.Options.Runtime)
	go rt.Guard(ctx, paths)
	for _, p := range Processes(plan, paths, self, KubeBinDir()) {
		c := s.start(ctx, p)
		if err := s.waitReady(ctx, c); err != nil {
			return s.fail(err)
		}
		if err := rt.Started(ctx, paths, p); err != nil {
			return s.fail(err)
		}
		if p.Name == "kube-apiserver" {
			if err := bootstrapCluster(ctx, paths, plan); err != nil {
				return s.fail(err)
			}
			if err := keepPodCIDRRoutes(ctx, paths, plan); err != nil {
				return s.fail(err)
			}
		}
	}
	if err := waitNodesReady(ctx, paths, plan, nodesReadyTimeout); err != nil {
		return s.fail(err)
	}
	s.setPhase(PhaseReady, "")
	<-ctx.Done()
	s.setPhase(PhaseStopping, "")
	return nil
}

type supervisor struct {
	paths    labplan.Paths
	mu       sync.Mutex
	state    State
	children []*child
}

type child struct {
	proc  labplan.Process
	index int // into state.Processes
	done  chan struct{}
	mu    sync.Mutex
	pid   int
}

func (s *supervisor) write() {
	s.state.Updated = time.Now()
	if err := writeJSON(s.paths.StateFile(), s.state); err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: write state: %v\n", err)
	}
}

func (s *supervisor) update(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.state)
	s.write()
}

func (s *supervisor) setPhase(p Phase, msg string) {
	s.update(func(st *State) { st.Phase, st.Error = p, msg })
}

func (s *supervisor) fail(err error) error {
	s.setPhase(PhaseFailed, err.Error())
	return err
}

// start runs p in its own goroutine, restarting it whenever it exits until ctx ends.
func (s *supervisor) start(ctx context.Context, p labplan.Process) *child {
	s.mu.Lock()
	c := &child{proc: p, index: len(s.state.Processes), done: make(chan struct{})}
	s.state.Processes = append(s.state.Processes, ProcessState{Name: p.Name, Log: s.paths.Log(p.Name)})
	s.children = append(s.children, c)
	s.write()
	s.mu.Unlock()
	go s.run(ctx, c)
	return c
}

func (s *supervisor) run(ctx context.Context, c *child) {
	defer close(c.done)
	// Children get SIGKILL when the thread that started them dies (Pdeathsig), so that a
	// crashed supervisor leaves no orphans; keep this goroutine on one thread for good.
	runtime.LockOSThread()
	backoff := time.Second
	for {
		started := time.Now()
		err := s.runOnce(c)
		s.update(func(st *State) {
			ps := &st.Processes[c.index]
			ps.Running, ps.LastExit = false, exitText(err)
		})
		if ctx.Err() != nil {
			return
		}
		for s.held(c.proc.Name) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond) // `lab hold`: keep it down until released
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRestartBackoff)
		s.update(func(st *State) { st.Processes[c.index].Restarts++ })
	}
}

func (s *supervisor) runOnce(c *child) error {
	logf, err := os.OpenFile(s.paths.Log(c.proc.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.proc.Argv[0], c.proc.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.proc.Cgroup != "" {
		fd, err := openNodeCgroup(c.proc.Cgroup)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.mu.Lock()
	c.pid = cmd.Process.Pid
	c.mu.Unlock()
	s.update(func(st *State) {
		ps := &st.Processes[c.index]
		ps.PID, ps.Running, ps.Started = cmd.Process.Pid, true, time.Now()
	})
	err = cmd.Wait()
	c.mu.Lock()
	c.pid = 0
	c.mu.Unlock()
	return err
}

// held reports whether a process is held down (a file <dir>/hold/<name> exists), so a
// test can keep an agent down for a while after killing it.
func (s *supervisor) held(name string) bool {
	_, err := os.Stat(s.paths.Hold(name))
	return err == nil
}

func exitText(err error) string {
	if err == nil {
		return "exited 0"
	}
	return err.Error()
}

// waitReady waits until c answers its health URL (or has simply stayed up when it has
// none). A process that keeps exiting fails at once with its last words.
func (s *supervisor) waitReady(ctx context.Context, c *child) error {
	client, err := healthClient(c.proc.HealthTLS)
	if err != nil {
		return fmt.Errorf("probe %s: %w", c.proc.Name, err)
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(processReadyTimeout)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		ps := s.state.Processes[c.index]
		s.mu.Unlock()
		if ps.Restarts >= 2 {
			return fmt.Errorf("%s keeps exiting (%s); last log line: %q; full log: %s",
				c.proc.Name, ps.LastExit, logtail.File(ps.Log), ps.Log)
		}
		if ps.Running && c.proc.Health == "" {
			return nil
		}
		if ps.Running {
			if resp, err := client.Get(c.proc.Health); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	log := s.paths.Log(c.proc.Name)
	return fmt.Errorf("%s was not ready within %v; last log line: %q; full log: %s",
		c.proc.Name, processReadyTimeout, logtail.File(log), log)
}

// stopAll stops the children in reverse start order: SIGTERM to each process group,
// then SIGKILL after stopGrace.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	children := append([]*child(nil), s.children...)
	s.mu.Unlock()
	for i := len(children) - 1; i >= 0; i-- {
		c := children[i]
		c.mu.Lock()
		pid := c.pid
		c.mu.Unlock()
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
		}
		select {
		case <-c.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-c.done
		}
	}
}
