package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent in a pod (--mount-bpffs=false) whose pin directory is not on a bpffs
// stops with the directory it checked and what to run on the node, before it
// creates anything. t.TempDir() is on tmpfs or a disk filesystem, never a bpffs.
func TestEnsureBPFFSRefusesWithoutMount(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{
		filepath.Join(root, "myelin"),                // the chart's <bpf.root>/myelin
		filepath.Join(root, "myelin", "node-1"),      // perNodePaths: the parent is missing too
		filepath.Join(root, "absent", "myelin", "n"), // several levels missing
	} {
		err := ensureBPFFS(dir, false)
		if err == nil {
			t.Fatalf("ensureBPFFS(%s, mount=false) on a non-bpffs = nil, want an error", dir)
		}
		for _, want := range []string{"--bpffs-dir " + dir, "is not on a bpffs", "mount -t bpf bpf " + root, "sys-fs-bpf.mount", "bpf.root"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ensureBPFFS(%s): error %q does not say %q", dir, err, want)
			}
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("ensureBPFFS created %v although it refused", entries)
	}
}
