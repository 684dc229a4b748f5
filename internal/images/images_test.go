package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/myelin-net/myelin/internal/testenv"
)

// fakeInputs lays out a cache with a tiny agent base and a bin dir whose binaries are
// copies of Debian's static busybox (any static ELF will do).
func fakeInputs(t *testing.T) (cache, bin string) {
	t.Helper()
	if _, err := exec.LookPath("busybox"); err != nil {
		testenv.Skipf(t, "needs busybox-static (make setup installs it): %v", err)
	}
	cache, bin = t.TempDir(), t.TempDir()
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"myelin", "myelin-agent", "myelin-cni", "myelin-pause"} {
		if err := os.WriteFile(filepath.Join(bin, b), busybox, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var base bytes.Buffer
	tw := tar.NewWriter(&base)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/os-release", Mode: 0o644, Size: 5, ModTime: Epoch})
	_, _ = tw.Write([]byte("test\n"))
	_ = tw.Close()
	if err := os.MkdirAll(filepath.Dir(AgentBase(cache)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(AgentBase(cache), base.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	writePortmap(t, cache, busybox)
	return cache, bin
}

// The same inputs give byte-identical archives, tagged myelin/<name>:<version> with no
// registry host, with the files the lab relies on.
func TestBuildIsReproducible(t *testing.T) {
	cache, bin := fakeInputs(t)
	other := t.TempDir()
	for _, c := range []string{cache, other} {
		if c == other {
			if err := os.MkdirAll(filepath.Dir(AgentBase(other)), 0o755); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(AgentBase(cache))
			_ = os.WriteFile(AgentBase(other), b, 0o644)
			writePortmap(t, other, mustRead(t, PortmapBinary(cache)))
		}
		if err := Build(Options{Cache: c, Version: "v1", BinDir: bin}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	for _, image := range Names {
		a, _ := os.ReadFile(Archive(cache, "v1", image))
		b, _ := os.ReadFile(Archive(other, "v1", image))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("image %s: two builds differ (%d and %d bytes)", image, len(a), len(b))
		}
		tag, _ := name.NewTag(Ref(image, "v1"))
		img, err := tarball.ImageFromPath(Archive(cache, "v1", image), &tag)
		if err != nil {
			t.Fatalf("image %s: read back as %s: %v", image, tag, err)
		}
		m, _ := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(Archive(cache, "v1", image)) })
		if len(m) != 1 || strings.Join(m[0].RepoTags, ",") != "myelin/"+image+":v1" {
			t.Errorf("image %s: manifest %+v, want the one tag myelin/%s:v1", image, m, image)
		}
		cf, err := img.ConfigFile()
		if err != nil || !cf.Created.Time.Equal(Epoch) {
			t.Errorf("image %s: created %v (%v), want %v", image, cf.Created, err, Epoch)
		}
	}
}

// Build skips an archive that exists, unless forced; a dynamic binary is refused.
func TestBuildSkipsAndRefusesDynamicBinaries(t *testing.T) {
	cache, bin := fakeInputs(t)
	if err := Build(Options{Cache: cache, Version: "v1", BinDir: bin}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "myelin-pause"), []byte("not an ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Build(Options{Cache: cache, Version: "v1", BinDir: bin}, &out); err != nil || !strings.Contains(out.String(), "exists") {
		t.Fatalf("second build: %v %q, want every archive kept", err, out.String())
	}
	if err := Build(Options{Cache: cache, Version: "v1", BinDir: bin, Force: true}, io.Discard); err == nil || !strings.Contains(err.Error(), "myelin-pause") {
		t.Fatalf("forced build with a broken myelin-pause: %v, want an error naming it", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "myelin-pause"), mustRead(t, "/bin/sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Build(Options{Cache: cache, Version: "v2", BinDir: bin}, io.Discard); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("build with a dynamic myelin-pause: %v, want it refused", err)
	}
}

// writePortmap puts a stand-in for scripts/build-cni-plugins.sh's portmap in the cache.
func writePortmap(t *testing.T, cache string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(PortmapBinary(cache)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PortmapBinary(cache), b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// The agent image needs the portmap plugin; without it the build names the script.
func TestAgentImageNeedsPortmap(t *testing.T) {
	cache, bin := fakeInputs(t)
	if err := os.Remove(PortmapBinary(cache)); err != nil {
		t.Fatal(err)
	}
	err := Build(Options{Cache: cache, Version: "v1", BinDir: bin}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "build-cni-plugins.sh") {
		t.Fatalf("build without portmap: %v, want an error naming scripts/build-cni-plugins.sh", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPruneKeepsCurrentNewestBaseAndE2E(t *testing.T) {
	cache := t.TempDir()
	names := []string{"base", "e2e", "v1", "v2", "v3", "v4", "v5", "current"}
	for i, n := range names {
		dir := filepath.Join(cache, "images", n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "agent.tar"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		// base and e2e are the oldest; current the oldest version, so only its name keeps it
		mod := time.Unix(int64(1000+i), 0)
		if n == "current" {
			mod = time.Unix(1, 0)
		}
		if err := os.Chtimes(dir, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	// Not a version of ours: a user's folder under a --cache of their own.
	holiday := filepath.Join(cache, "images", "holiday-2019")
	if err := os.MkdirAll(holiday, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(holiday, "beach.jpg"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(10, 0)
	if err := os.Chtimes(holiday, old, old); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Prune(cache, "current", &out); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(filepath.Join(cache, "images"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range left {
		got = append(got, d.Name())
	}
	if want := "base current e2e holiday-2019 v3 v4 v5"; strings.Join(got, " ") != want {
		t.Errorf("after Prune: %v, want %s (output %q)", got, want, out.String())
	}
	if !strings.Contains(out.String(), "removed the archives of version v1") {
		t.Errorf("Prune did not say what it removed: %q", out.String())
	}
}
