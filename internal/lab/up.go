package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/logtail"
)

// upTimeout bounds how long `lab up` waits for the supervisor to report the lab ready.
const upTimeout = 5 * time.Minute

// ExitRefused is the exit status of `myelin lab up` when it refused before building
// anything (no root, another lab command holds the lock, a lab runs, a check failed):
// a caller that tears down the lab it brings up (myelin bench) then knows there is
// nothing of its own to remove.
const ExitRefused = 3

// refused is an error of Up returned before it built anything.
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }
func (r refused) Unwrap() error { return r.err }

// Refused reports whether err is Up's, returned before it built anything.
func Refused(err error) bool { return errors.As(err, new(refused)) }

// Running reports whether a lab's supervisor is alive in paths.
func Running(paths labplan.Paths) bool { return supervisorPID(paths) != 0 }

// Up builds the lab of plan: checks first, then the network, certificates and
// kubeconfigs, then starts the supervisor and waits until the cluster is ready. On a
// running lab of the same options it says so and changes nothing (so `up` is safe to
// repeat); a running lab of other options is an error, so that nobody measures or
// tears down a lab that is not the one they asked for. Any failure (or ctx ending)
// tears down what was built, so no half-built lab is left behind. It holds the lab's
// lock (lock.go) while it runs, and fails at once with ErrBusy while another lab up,
// down or restart holds it. fresh refuses a running lab of any options: the caller
// tears down what it brings up, so it must build its own. An error returned before
// anything was built satisfies Refused.
func Up(ctx context.Context, paths labplan.Paths, plan labplan.Plan, fresh bool, out io.Writer) (err error) {
	if os.Geteuid() != 0 {
		return refused{errNotRoot}
	}
	l, err := lockLab(paths)
	if err != nil {
		return refused{err}
	}
	defer func() { l.release(err != nil) }()
	if Running(paths) {
		if fresh {
			return refused{fmt.Errorf("a lab is already running in %s and --new asks for one of its own; run myelin lab down first", paths.Dir)}
		}
		if err := alreadyRunning(paths, plan, out); err != nil {
			return refused{err}
		}
		return nil
	}
	if err := preflight(paths, plan); err != nil {
		return refused{err}
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(out, "lab up failed; removing what it built\n")
			if derr := down(paths, io.Discard); derr != nil {
				err = fmt.Errorf("%w (and %v)", err, derr)
			}
		}
	}()

	fmt.Fprintf(out, "building the lab network: %d nodes on a %s underlay\n", len(plan.Nodes), plan.Options.Underlay)
	if err := writeLabDir(paths, plan); err != nil {
		return err
	}
	if err := mountBPFFS(paths.BPFFSMounted()); err != nil { // bpffs.go
		return err
	}
	if err := buildNetwork(plan); err != nil {
		return fmt.Errorf("build lab network: %w", err)
	}
	if err := writeComponentConfigs(paths, plan); err != nil {
		return err
	}
	rt := RuntimeOf(plan.Options.Runtime)
	if err := rt.Prepare(paths, plan); err != nil {
		return fmt.Errorf("prepare the nodes' runtime: %w", err)
	}
	fmt.Fprintf(out, "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and %s%s (logs in %s)\n",
		rt.Describe(len(plan.Nodes)), FlavourOf(plan.Options.CNI).Daemons(plan), paths.Logs())
	if plan.Options.CNI == labplan.CNINone {
		fmt.Fprintf(out, "--cni none: waiting only for the nodes to register; they stay NotReady until a CNI is installed\n")
	}
	if err := startSupervisor(paths); err != nil {
		return err
	}
	if err := waitReady(ctx, paths); err != nil {
		return err
	}
	printUsage(out, paths, plan)
	return nil
}

// writeLabDir makes the lab directory, marked before anything else is written in it
// (labdir.go), its logs and etcd's data directories, and records the plan.
func writeLabDir(paths labplan.Paths, plan labplan.Plan) error {
	if err := makeLabDir(paths); err != nil {
		return err
	}
	if err := os.MkdirAll(paths.Logs(), 0o755); err != nil {
		return err
	}
	// etcd's data holds every Secret: the owner's only, as etcd itself asks.
	if err := os.MkdirAll(paths.Etcd(), 0o700); err != nil {
		return err
	}
	return writeJSON(paths.PlanFile(), record{Plan: plan, Created: time.Now()})
}

// buildNetwork builds the lab's namespaces, links and routes (the plan's steps) and
// the underlay's BIG TCP settings.
func buildNetwork(plan labplan.Plan) error {
	for _, step := range plan.NetworkSteps() {
		if err := run(step...); err != nil {
			return err
		}
	}
	return underlayBIGTCP(plan) // underlay.go
}

// writeComponentConfigs writes what the control plane and the nodes' components read:
// certificates, kubeconfigs and kube-proxy's configuration.
func writeComponentConfigs(paths labplan.Paths, plan labplan.Plan) error {
	if err := writePKI(paths, plan); err != nil {
		return fmt.Errorf("write lab certificates: %w", err)
	}
	if err := writeKubeconfigs(paths, plan); err != nil {
		return fmt.Errorf("write kubeconfigs: %w", err)
	}
	if err := writeKubeProxyConfigs(paths, plan); err != nil {
		return fmt.Errorf("write kube-proxy configuration: %w", err)
	}
	return nil
}

// alreadyRunning answers `lab up` while a lab runs: fine if it is the lab asked for.
func alreadyRunning(paths labplan.Paths, plan labplan.Plan, out io.Writer) error {
	running, err := LoadPlan(paths)
	if err != nil {
		return fmt.Errorf("a lab is running but its plan %s is unreadable (%v); run myelin lab down, then myelin lab up", paths.PlanFile(), err)
	}
	if running.Options != plan.Options {
		return fmt.Errorf("lab up %s: a lab with other options is already running (%s); run myelin lab down first, or use the running one (export KUBECONFIG=%s)",
			plan.Options.Flags(), running.Options.Flags(), paths.Kubeconfig())
	}
	fmt.Fprintf(out, "a lab is already running (%s); nothing changed.\n", running.Options.Flags())
	fmt.Fprintf(out, "use it with: export KUBECONFIG=%s; to rebuild it, run myelin lab down first\n", paths.Kubeconfig())
	return nil
}

// startSupervisor starts `myelin lab supervise` in its own session so it outlives `up`.
func startSupervisor(paths labplan.Paths) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(paths.Log("supervisor"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "lab", "supervise", "--dir", paths.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start lab supervisor: %w", err)
	}
	return cmd.Process.Release()
}

// waitReady follows the supervisor's state file until the lab is ready or has failed.
func waitReady(ctx context.Context, paths labplan.Paths) error {
	ctx, cancel := context.WithTimeout(ctx, upTimeout)
	defer cancel()
	sawSupervisor := false
	for {
		st, err := LoadState(paths)
		if err == nil {
			switch st.Phase {
			case PhaseReady:
				return nil
			case PhaseFailed:
				return errors.New(st.Error)
			}
		}
		if Running(paths) {
			sawSupervisor = true
		} else if sawSupervisor {
			return fmt.Errorf("the lab supervisor exited; last log line: %q; full log: %s",
				logtail.File(paths.Log("supervisor")), paths.Log("supervisor"))
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the lab was not ready within %v; see the logs in %s", upTimeout, paths.Logs())
			}
			return fmt.Errorf("interrupted")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func printUsage(out io.Writer, paths labplan.Paths, plan labplan.Plan) {
	fmt.Fprintf(out, "\nthe lab is up: %d nodes, --runtime %s %s, apiserver https://%s:%d\n",
		len(plan.Nodes), plan.Options.RuntimeName(), plan.Options.Describe(), plan.Addressing.ControlPlaneIP(), labplan.APIServerPort)
	var names []string
	for _, n := range plan.Nodes {
		names = append(names, fmt.Sprintf("%s (%s)", n.Name, n.IP))
	}
	fmt.Fprintf(out, "nodes: %s\n\n", strings.Join(names, ", "))
	fmt.Fprintf(out, "use it with kubectl:\n  export KUBECONFIG=%s PATH=%s:$PATH\n  kubectl get nodes -o wide\n\n",
		paths.Kubeconfig(), KubeBinDir())
	if plan.Options.Runtime == labplan.RuntimeContainerd {
		fmt.Fprintf(out, "a node's containerd:     ctr -a %s -n k8s.io containers ls\n", paths.ContainerdSocket(plan.Nodes[0].Name))
		fmt.Fprintf(out, "run a command in a pod:  kubectl exec POD -- ip addr\n")
	} else {
		fmt.Fprintf(out, "run a command in a pod:  myelin lab exec POD -- ip addr\n")
	}
	fmt.Fprintf(out, "see the lab:             myelin lab status\n")
	fmt.Fprintf(out, "remove everything:       myelin lab down\n")
}
