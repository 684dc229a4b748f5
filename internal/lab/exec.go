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
	corev1 "k8s.io/api/core/v1"
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
	plan, err := LoadPlan(paths)
	if err != nil {
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
	ns, err := podNetNS(plan, p)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Stat(labplan.NetNSPath(ns)); err != nil {
		return nil, "", fmt.Errorf("pod %s/%s has no network namespace yet (phase %s); wait until it is Running",
			namespace, pod, p.Status.Phase)
	}
	return append([]string{"nsenter", "--net=" + labplan.NetNSPath(ns), "--"}, argv...), p.Spec.NodeName, nil
}

// podNetNS names the network namespace of pod p: its own, or for a hostNetwork pod its
// node's, which must be a node of the plan. spec.nodeName is whatever the pod's author
// wrote (a pod may be bound to any name), so it never picks a namespace the lab did not
// make (another tool's on this machine) for the operator's command.
func podNetNS(plan labplan.Plan, p *corev1.Pod) (string, error) {
	if !p.Spec.HostNetwork {
		return labplan.PodNetNS(string(p.UID)), nil
	}
	if _, ok := plan.Node(p.Spec.NodeName); !ok {
		return "", fmt.Errorf("pod %s/%s is a hostNetwork pod on %q, which is not a node of this lab; lab exec runs only in the lab's namespaces",
			p.Namespace, p.Name, p.Spec.NodeName)
	}
	return p.Spec.NodeName, nil
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
