package lab

import (
	"os"
	"strings"
	"testing"
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
