package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/connectivity"
	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/version"
)

// PodExecutor runs commands in lab pods' network namespaces from this machine, as
// `myelin lab exec` does: the lab kubelet has no exec API (its pods are host programs).
type PodExecutor struct{ Paths labplan.Paths }

// Exec runs argv in the pod's network namespace and returns its combined output.
func (e PodExecutor) Exec(ctx context.Context, namespace, pod string, argv []string) (string, error) {
	full, err := ExecArgv(ctx, e.Paths, namespace, pod, argv)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, full[0], full[1:]...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ConnectivityTarget fills what `myelin connectivity test` needs to run against the
// running lab: on the lab runtime, pods run this machine's myelin binary and probes
// enter their netns; on containerd, pods run the myelin/test image and probes go
// through pods/exec. The check for agents reads the lab's plan: with --cni myelin the
// agents are the lab's processes (their sockets must exist); with --cni none, the
// chart's DaemonSet (the default check); any other CNI is not myelin.
func ConnectivityTarget(paths labplan.Paths, o *connectivity.Options) error {
	plan, err := LoadPlan(paths)
	if err != nil {
		return err
	}
	o.Image, o.Myelin = images.Ref(images.Test, version.Version), "/usr/bin/myelin"
	if plan.Options.Runtime == "" || plan.Options.Runtime == labplan.RuntimeLab {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the myelin binary the lab pods run: %w", err)
		}
		o.Myelin, o.Exec = self, PodExecutor{Paths: paths}
	}
	switch plan.Options.CNI {
	case labplan.CNIMyelin:
		o.CheckMyelin = func(context.Context) error { return labAgents(plan) }
	case labplan.CNINone:
	default:
		return fmt.Errorf("the lab runs --cni %s, not myelin: no myelin agents found; bring up a lab with --cni myelin", plan.Options.CNI)
	}
	return nil
}

// labAgents fails unless every lab node's agent socket exists.
func labAgents(plan labplan.Plan) error {
	var missing []string
	for _, n := range plan.Nodes {
		if _, err := os.Stat(api.NodeSocket(n.Name)); err != nil {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no myelin agent running on lab node(s) %s (no socket %s); check myelin lab status",
			strings.Join(missing, ", "), filepath.Dir(api.NodeSocket(missing[0])))
	}
	return nil
}
