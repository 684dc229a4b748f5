package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExecArgv returns the command line that runs argv inside a Pod's network namespace
// (the node's, for hostNetwork Pods).
func ExecArgv(ctx context.Context, paths labplan.Paths, namespace, pod string, argv []string) ([]string, error) {
	full, _, err := execTarget(ctx, paths, namespace, pod, argv)
	return full, err
}

// execTarget is ExecArgv and the node the Pod runs on.
func execTarget(ctx context.Context, paths labplan.Paths, namespace, pod string, argv []string) ([]string, string, error) {
	if len(argv) == 0 {
		return nil, "", fmt.Errorf("no command given; usage: myelin lab exec POD [-n NAMESPACE] -- COMMAND [ARGS...]")
	}
	if _, err := LoadPlan(paths); err != nil {
		return nil, "", err
	}
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return nil, "", err
	}
	p, err := cs.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("pod %s/%s not found; list pods with: kubectl get pods -A", namespace, pod)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get pod %s/%s: %w", namespace, pod, err)
	}
	ns := labplan.PodNetNS(string(p.UID))
	if p.Spec.HostNetwork {
		ns = p.Spec.NodeName
	}
	if _, err := os.Stat(labplan.NetNSPath(ns)); err != nil {
		return nil, "", fmt.Errorf("pod %s/%s has no network namespace yet (phase %s); wait until it is Running",
			namespace, pod, p.Status.Phase)
	}
	return append([]string{"nsenter", "--net=" + labplan.NetNSPath(ns), "--"}, argv...), p.Spec.NodeName, nil
}

// Exec replaces the current process with argv run inside a Pod's network namespace,
// so the command's exit status and terminal are the caller's. With the lab runtime
// it first joins the node's cgroup (labplan.HostCgroup), as a container's exec would
// its container's: the node's socket-LB then serves the command too.
func Exec(ctx context.Context, paths labplan.Paths, namespace, pod string, argv []string) error {
	full, node, err := execTarget(ctx, paths, namespace, pod, argv)
	if err != nil {
		return err
	}
	if err := joinNodeCgroup(node); err != nil {
		return err
	}
	bin, err := exec.LookPath(full[0])
	if err != nil {
		return fmt.Errorf("nsenter not found: install util-linux (make setup)")
	}
	return syscall.Exec(bin, full, os.Environ())
}

// joinNodeCgroup moves this process into node's host cgroup (v2) when the lab made
// the node's cgroup, creating it there if missing (the containerd runtime's nodes have
// only their kubepods below it); nothing otherwise. Best effort: a node cgroup that
// takes no processes (containerd's kubepods parent with controllers on, on a v2-only
// machine) leaves the command where it is, served by the tc path as before.
func joinNodeCgroup(node string) error {
	if node == "" || !exists(labplan.Cgroup2Dir(node)) {
		return nil
	}
	host := labplan.HostCgroup(node)
	if err := os.Mkdir(host, 0o755); err != nil && !os.IsExist(err) {
		return nil
	}
	_ = os.WriteFile(filepath.Join(host, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	return nil
}
