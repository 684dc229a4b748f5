package lab

import (
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestKubeVersionMatchesSetup keeps the lab's KubeVersion and the one setup builds equal.
func TestKubeVersionMatchesSetup(t *testing.T) {
	b, err := os.ReadFile("../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "KUBE_VERSION="+KubeVersion+"\n") {
		t.Fatalf("scripts/versions.sh does not pin KUBE_VERSION=%s; keep the two in step", KubeVersion)
	}
}

// TestKubeBinDirFollowsSetup checks KubeBinDir's rule (the one scripts/versions.sh
// uses), including an environment without $HOME.
func TestKubeBinDirFollowsSetup(t *testing.T) {
	want := "/kubernetes/" + KubeVersion + "/bin"
	t.Setenv("MYELIN_CACHE", "/opt/c")
	if got := KubeBinDir(); got != "/opt/c"+want {
		t.Errorf("with MYELIN_CACHE: %s", got)
	}
	t.Setenv("MYELIN_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got := KubeBinDir(); got != "/x/myelin"+want {
		t.Errorf("with XDG_CACHE_HOME: %s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if got := KubeBinDir(); !strings.HasPrefix(got, "/") || !strings.HasSuffix(got, "/.cache/myelin"+want) {
		t.Errorf("without HOME: %s, want an absolute path under the user's home", got)
	}
}

func flannelPlan(t *testing.T, backend string) labplan.Plan {
	t.Helper()
	o := labplan.DefaultOptions()
	o.CNI, o.FlannelBackend = labplan.CNIFlannel, backend
	p, err := labplan.NewPlan(o, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlannelProcesses(t *testing.T) {
	paths := labplan.Paths{Dir: "/run/myelin-lab"}
	p := flannelPlan(t, labplan.FlannelHostGW)
	var flanneld []labplan.Process
	for _, proc := range Processes(p, paths, "/bin/myelin", "/kube") {
		if strings.HasPrefix(proc.Name, "agent-") {
			t.Errorf("--cni flannel runs %s", proc.Name)
		}
		if strings.HasPrefix(proc.Name, "flanneld-") {
			flanneld = append(flanneld, proc)
		}
	}
	if len(flanneld) != 2 {
		t.Fatalf("flanneld processes = %d, want one per node (2)", len(flanneld))
	}
	argv := strings.Join(flanneld[1].Argv, " ")
	for _, want := range []string{
		"nsenter --net=/run/netns/myelin-node-2 -- " + flannel.Binary(),
		"--etcd-endpoints http://198.18.0.1:2379", "--etcd-prefix /coreos.com/network", "--iface eth0",
		"--subnet-file /run/myelin-lab/nodes/myelin-node-2/flannel/subnet.env", "--ip-masq",
	} {
		if !strings.Contains(argv, want) {
			t.Errorf("flanneld argv %q lacks %q", argv, want)
		}
	}
	if strings.Contains(argv, "kube-subnet-mgr") || strings.Contains(argv, "/run/flannel") {
		t.Errorf("flanneld argv %q uses the Kubernetes subnet manager or the shared /run/flannel", argv)
	}
}
