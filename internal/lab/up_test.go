package lab

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestAlreadyRunning checks what `lab up` answers while a lab runs: the same options are
// a no-op, other options a refusal that names both labs and the fix.
func TestAlreadyRunning(t *testing.T) {
	paths := labplan.Paths{Dir: t.TempDir()}
	running, err := labplan.NewPlan(labplan.DefaultOptions(), labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(paths.PlanFile(), record{Plan: running, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := alreadyRunning(paths, running, &out); err != nil {
		t.Errorf("same options: %v, want a no-op", err)
	}
	if !strings.Contains(out.String(), "already running (--nodes 2 --cni myelin --profile native --underlay l2 --runtime lab)") {
		t.Errorf("same options said %q, want it to name the running lab", out.String())
	}

	other := labplan.DefaultOptions()
	other.Nodes, other.KubeProxy = 3, "iptables"
	asked, err := labplan.NewPlan(other, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	err = alreadyRunning(paths, asked, &out)
	want := "lab up --nodes 3 --cni myelin --profile native --underlay l2 --kube-proxy iptables --runtime lab: " +
		"a lab with other options is already running (--nodes 2 --cni myelin --profile native --underlay l2 --runtime lab); run myelin lab down first"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("other options: %v, want an error containing %q", err, want)
	}

	if err := alreadyRunning(labplan.Paths{Dir: t.TempDir()}, asked, &out); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("no plan file: %v, want an error saying the plan is unreadable", err)
	}
}
