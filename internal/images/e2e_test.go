package images

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestBuildE2E(t *testing.T) {
	cache, bin := fakeInputs(t)
	kube := t.TempDir()
	o := E2EOptions{Cache: cache, KubeBin: kube, CoreDNS: filepath.Join(bin, "myelin"), BinDir: bin}
	if err := BuildE2E(o, io.Discard); err == nil || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("build without the agnhost base: %v, want an error naming make setup", err)
	}
	base, _ := os.ReadFile(AgentBase(cache))
	_ = os.WriteFile(filepath.Join(cache, "images", "base", AgnhostBaseName+".tar"), base, 0o644)
	_ = os.WriteFile(filepath.Join(kube, "agnhost"), mustRead(t, "/bin/busybox"), 0o755)
	_ = os.MkdirAll(filepath.Join(kube, "agnhost-files"), 0o755)
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		_ = os.WriteFile(filepath.Join(kube, "agnhost-files", f), []byte(f), 0o644)
	}
	if err := BuildE2E(o, io.Discard); err == nil || !strings.Contains(err.Error(), NginxBaseName) {
		t.Fatalf("build without the nginx base: %v, want an error naming %s", err, NginxBaseName)
	}
	_ = os.WriteFile(filepath.Join(cache, "images", "base", NginxBaseName+".tar"), base, 0o644)
	if err := BuildE2E(o, io.Discard); err == nil || !strings.Contains(err.Error(), "regression-issue-74839") {
		t.Fatalf("build without the boom-server binary: %v, want an error naming it", err)
	}
	_ = os.WriteFile(filepath.Join(kube, "regression-issue-74839"), mustRead(t, "/bin/busybox"), 0o755)
	if err := BuildE2E(o, io.Discard); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{E2EAgnhost: "myelin.invalid/e2e/agnhost:2.56", E2EBusybox: "myelin.invalid/e2e/busybox:1.37.0-1",
		E2EPause: "myelin.invalid/e2e/pause:3.10.1", E2EJessieDnsutils: "myelin.invalid/e2e/jessie-dnsutils:1.7",
		E2ENginx: "myelin.invalid/e2e/nginx:1.14-4", E2ERegression74839: "myelin.invalid/e2e/regression-issue-74839:1.2",
		CoreDNSImage: "myelin/coredns:v1.12.4"}
	for image, ref := range want {
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(E2EArchive(cache, image)) })
		if err != nil || len(m) != 1 || strings.Join(m[0].RepoTags, ",") != ref {
			t.Errorf("image %s: manifest %+v (%v), want the one tag %s", image, m, err, ref)
		}
	}
	if l := E2ERepoList(); !strings.Contains(l, "promoterE2eRegistry: myelin.invalid/e2e\n") || !strings.Contains(l, "gcRegistry: myelin.invalid/e2e\n") {
		t.Errorf("repo list:\n%s\nwant the suite's registries pointed at myelin.invalid/e2e", l)
	}
}
