package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/myelin-net/myelin/internal/version"
)

// myelinBin is the myelin binary built from this tree for the tests.
var myelinBin string

var paths = labplan.Paths{Dir: labplan.DefaultDir}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "myelin-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// World-readable so the not-root test can run it as nobody.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	myelinBin = filepath.Join(dir, "myelin")
	// All commands, side by side: the lab starts myelin-agent from myelin's directory.
	build := exec.Command("go", "build", "-tags", version.BuildTags, "-o", dir+"/", "github.com/myelin-net/myelin/cmd/...")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	// Static, as make build: the images (TestLabContainerd) hold these binaries.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build myelin:", err)
		return 1
	}
	return m.Run()
}

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "run a lab (network namespaces, a real control plane)")
	testenv.LockLab(t) // test/install brings up labs too, in parallel with this package
}

// myelin runs the myelin CLI and returns its combined output and error.
func myelin(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(myelinBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// requireNoLab fails the test when a lab runs or one's leftovers are in the way
// (lab.CheckStale names them).
func requireNoLab(t *testing.T) {
	t.Helper()
	if lab.Running(paths) {
		t.Fatal("a lab is already running on this machine; run myelin lab down before the e2e tests")
	}
	if err := lab.CheckStale(paths); err != nil {
		t.Fatal(err)
	}
}

// labUp brings up a lab and registers its teardown, which also checks that nothing
// named myelin-* is left. On failure the lab's logs are copied into the test output.
func labUp(t *testing.T, args ...string) kubernetes.Interface {
	t.Helper()
	requireNoLab(t)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t)
		}
		labDown(t)
	})
	bpffsBefore = isBPFFS("/sys/fs/bpf")
	out, err := myelin(append([]string{"lab", "up"}, args...)...)
	if err != nil {
		t.Fatalf("myelin lab up %v: %v\n%s", args, err, out)
	}
	if !isBPFFS("/sys/fs/bpf") {
		t.Fatalf("after myelin lab up, /sys/fs/bpf is not a bpffs: the nodes' pins (and the chart's agents) need one")
	}
	cs, err := lab.Client(paths.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// bpffsBefore is whether /sys/fs/bpf was a bpffs before the last lab up: lab up mounts
// one where the machine has none (as a node's boot would), and lab down takes it back.
var bpffsBefore = true

// isBPFFS reports whether dir is on a BPF filesystem (false when it can't tell).
func isBPFFS(dir string) bool {
	ok, err := lab.IsBPFFS(dir)
	return ok && err == nil
}

// labDown runs myelin lab down and asserts that the lab left nothing behind.
func labDown(t *testing.T) {
	t.Helper()
	if out, err := myelin("lab", "down"); err != nil {
		t.Errorf("myelin lab down: %v\n%s", err, out)
	}
	for _, left := range leftovers() {
		t.Errorf("left behind after lab down: %s", left)
	}
}

// leftovers lists everything of a lab that still exists: namespaces, root links,
// processes, bpffs pins, files.
func leftovers() []string {
	var out []string
	for _, ns := range lab.LeftoverNetNS() {
		out = append(out, "netns "+ns)
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		// A check that cannot look must not pass.
		out = append(out, fmt.Sprintf("unknown: ip -o link show failed: %v", err))
	}
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], labplan.NamePrefix) {
			out = append(out, "link "+strings.TrimSuffix(f[1], ":"))
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // kernel thread, zombie or gone
		}
		c := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(c, labplan.DefaultDir) || strings.Contains(c, myelinBin+" lab ") {
			out = append(out, "process "+p.Name()+": "+c)
		}
	}
	out = append(out, runtimeLeftovers()...)
	if !bpffsBefore && isBPFFS("/sys/fs/bpf") {
		out = append(out, "mount: the bpffs at /sys/fs/bpf that lab up mounted")
	}
	for _, glob := range []string{"/sys/fs/bpf/myelin*", "/sys/fs/bpf/myelin/" + labplan.NamePrefix + "*", "/run/myelin", labplan.DefaultDir} {
		matches, _ := filepath.Glob(glob)
		for _, m := range matches {
			out = append(out, "path "+m)
		}
	}
	return out
}

func dumpLogs(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(paths.Dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("==== %s (tail) ====\n%s", l, b)
	}
}

// eventually polls cond until it reports done or the deadline passes. It waits for the
// cluster to converge; it asserts nothing about speed.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	for {
		done, state := cond(ctx)
		if done {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not done within %v; last state: %s", what, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
