package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// The lab's cached CNI results are those of its networks and the loopback results
// of the same sandboxes; another network's results and their loopback stay.
func TestCNIResultsOfTheLab(t *testing.T) {
	dir := t.TempDir()
	lab, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	files := []string{
		"myelin-" + lab + "-eth0", "cni-loopback-" + lab + "-lo",
		"cbr0-" + other + "-eth0", "cni-loopback-" + other + "-lo", "unrelated",
		"myelin-bridge-" + strings.Repeat("c", 64) + "-eth0",
		"calico-" + strings.Repeat("d", 64) + "-eth0", "cni-loopback-" + strings.Repeat("d", 64) + "-lo",
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, f := range cniResultsIn(dir) {
		got = append(got, filepath.Base(f))
	}
	slices.Sort(got)
	want := []string{"cbr0-" + other + "-eth0", "cni-loopback-" + lab + "-lo", "cni-loopback-" + other + "-lo",
		"myelin-" + lab + "-eth0", "myelin-bridge-" + strings.Repeat("c", 64) + "-eth0"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("lab CNI results:\n got %v\nwant %v", got, want)
	}
}

// Of the cached results of the lab's network names, lab down removes only those of
// sandboxes the lab's containerds made: the machine's own pods on a network named
// cbr0 keep theirs.
func TestOwnCNIResults(t *testing.T) {
	paths := labplan.Paths{Dir: t.TempDir()}
	lab, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	if err := os.MkdirAll(filepath.Join(paths.ContainerdRoot(labplan.NodeName(1)), "io.containerd.grpc.v1.cri", "sandboxes", lab), 0o755); err != nil {
		t.Fatal(err)
	}
	results := []string{"/var/lib/cni/results/cbr0-" + lab + "-eth0", "/var/lib/cni/results/cni-loopback-" + lab + "-lo",
		"/var/lib/cni/results/cbr0-" + other + "-eth0", "/var/lib/cni/results/cni-loopback-" + other + "-lo"}
	got := ownCNIResults(results, labSandboxes(paths))
	if want := results[:2]; !slices.Equal(got, want) {
		t.Errorf("own results %v, want %v (the lab's sandbox only)", got, want)
	}
}
