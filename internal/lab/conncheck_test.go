package lab

import (
	"context"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/connectivity"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func writePlan(t *testing.T, o labplan.Options) labplan.Paths {
	t.Helper()
	paths := labplan.Paths{Dir: t.TempDir()}
	plan := labplan.Plan{Options: o, Nodes: []labplan.Node{{Name: "myelin-node-99"}}}
	if err := writeJSON(paths.PlanFile(), record{Plan: plan}); err != nil {
		t.Fatal(err)
	}
	return paths
}

// TestConnectivityTarget: the lab runtime probes through the pods' netns with this
// binary; containerd through pods/exec with the test image; --cni none leaves the
// check to the chart's DaemonSet; another CNI is refused in one line.
func TestConnectivityTarget(t *testing.T) {
	var o connectivity.Options
	if err := ConnectivityTarget(writePlan(t, labplan.Options{CNI: labplan.CNIMyelin}), &o); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Exec.(PodExecutor); !ok || o.Myelin == "/usr/bin/myelin" || o.CheckMyelin == nil {
		t.Errorf("lab runtime: exec %T, myelin %q, check set %v", o.Exec, o.Myelin, o.CheckMyelin != nil)
	}
	if err := o.CheckMyelin(context.Background()); err == nil || !strings.Contains(err.Error(), "no myelin agent running on lab node(s) myelin-node-99") {
		t.Errorf("no agent sockets: %v", err)
	}
	o = connectivity.Options{}
	if err := ConnectivityTarget(writePlan(t, labplan.Options{CNI: labplan.CNINone, Runtime: labplan.RuntimeContainerd}), &o); err != nil {
		t.Fatal(err)
	}
	if o.Exec != nil || o.Myelin != "/usr/bin/myelin" || !strings.HasPrefix(o.Image, "myelin/test:") || o.CheckMyelin != nil {
		t.Errorf("containerd + chart: exec %T, myelin %q, image %q, check set %v", o.Exec, o.Myelin, o.Image, o.CheckMyelin != nil)
	}
	err := ConnectivityTarget(writePlan(t, labplan.Options{CNI: labplan.CNIFlannel}), &connectivity.Options{})
	if err == nil || !strings.Contains(err.Error(), "the lab runs --cni flannel, not myelin: no myelin agents found") {
		t.Errorf("flannel lab: %v", err)
	}
}
