package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
