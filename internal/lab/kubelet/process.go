package kubelet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
)

// maxStopGrace caps a Pod's terminationGracePeriodSeconds: the lab stops faster.
const maxStopGrace = 10 * time.Second

// errNoCommand: the lab has no images, so a container must name a host program.
var errNoCommand = errors.New("the lab kubelet runs programs of the host and has no images: set spec.containers[0].command")

// exit is how a container's command ended.
type exit struct {
	code     int
	err      error // set when the command could not start at all
	started  time.Time
	finished time.Time
}

// process is the first container of a Pod, running inside the Pod's netns.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed after the exit has been sent
}

// containerEnv returns the container's environment: literal values and the downward
// API fields a pod commonly asks for.
func containerEnv(pod *corev1.Pod, c corev1.Container, podIP string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=/root"}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "status.podIP":
				v = podIP
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return append(env, "POD_NAME="+pod.Name, "POD_NAMESPACE="+pod.Namespace)
}

// startProcess runs the first container's command in netns and sends its exit on exits.
func startProcess(pod *corev1.Pod, netns, podIP, logDir string, exits chan<- exit) (*process, error) {
	c := pod.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(c.Command) == 0 {
		return nil, errNoCommand
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, c.Name))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if netns != "" {
		argv = append([]string{"nsenter", "--net=" + labplan.NetNSPath(netns), "--"}, argv...)
	}
	p := &process{done: make(chan struct{})}
	started := make(chan error)
	go func() {
		// Pdeathsig follows the thread that forked: keep it alive while the command runs,
		// so the command dies with the kubelet and never outlives the lab.
		runtime.LockOSThread()
		defer logf.Close()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = containerEnv(pod, c, podIP)
		cmd.Dir = c.WorkingDir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd, p.started = cmd, time.Now()
		started <- nil
		err := cmd.Wait()
		ex := exit{started: p.started, finished: time.Now()}
		if cmd.ProcessState != nil {
			ex.code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ex.code = 128 + int(ws.Signal())
			}
		} else {
			ex.err = err
		}
		exits <- ex
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %v: %w", argv, err)
	}
	return p, nil
}

// stop sends SIGTERM to the command's process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(min(grace, maxStopGrace)):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
}
