package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/kube/kubefake"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// A datapath that fails to load or attach withdraws myelin's conflist (an earlier
// agent's), so the runtime reports the network not ready; other CNIs' files stay. An
// agent stopping on SIGTERM keeps it, and a missing conflist is not an error.
func TestDatapathFailureWithdrawsConflist(t *testing.T) {
	dir := t.TempDir()
	ours, other := filepath.Join(dir, nodelayout.CNIConfFile), filepath.Join(dir, "10-other.conflist")
	for _, f := range []string{ours, other} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &startup{cfg: Config{Node: "n1", CNIConfDir: dir}, cs: kubefake.Wrap(fake.NewSimpleClientset()), log: slog.Default()}

	stopping, cancel := context.WithCancel(context.Background())
	cancel()
	s.reportDatapathFailure(stopping, context.Canceled)
	if _, err := os.Stat(ours); err != nil {
		t.Fatalf("an agent stopping on SIGTERM removed the conflist: %v", err)
	}

	s.reportDatapathFailure(context.Background(), errors.New("attach to uplink eth0: operation not permitted"))
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after a datapath failure %s: stat err %v, want it removed", ours, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another CNI's conflist was touched: %v", err)
	}
	if err := withdrawConflist(s.cfg); err != nil {
		t.Errorf("withdrawConflist with no conflist: %v, want nil", err)
	}
}

// With a portmap plugin given, installCNI copies it in as myelin-portmap and chains it
// after myelin-cni with the portMappings capability (the runtime then passes a pod's
// hostPorts); without one the conflist is myelin-cni alone. A missing portmap binary is
// an error naming it.
func TestInstallCNIChainsPortmap(t *testing.T) {
	src := t.TempDir()
	plugin, portmap := filepath.Join(src, "myelin-cni"), filepath.Join(src, "portmap")
	for _, f := range []string{plugin, portmap} {
		if err := os.WriteFile(f, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		portmap string
		want    []string
	}{{"", []string{"myelin-cni"}}, {portmap, []string{"myelin-cni", PortmapPlugin}}} {
		cfg := Config{CNIBinDir: t.TempDir(), CNIConfDir: t.TempDir(), StateDir: "/run/myelin", CNIPluginSource: plugin, PortmapSource: tc.portmap}
		if err := installCNI(cfg); err != nil {
			t.Fatalf("installCNI with portmap %q: %v", tc.portmap, err)
		}
		b, err := os.ReadFile(filepath.Join(cfg.CNIConfDir, nodelayout.CNIConfFile))
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []struct {
				Type         string          `json:"type"`
				MasqAll      bool            `json:"masqAll"`
				Capabilities map[string]bool `json:"capabilities"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, p := range conf.Plugins {
			types = append(types, p.Type)
		}
		if !slices.Equal(types, tc.want) {
			t.Errorf("portmap %q: conflist plugins %v, want %v", tc.portmap, types, tc.want)
		}
		_, statErr := os.Stat(filepath.Join(cfg.CNIBinDir, PortmapPlugin))
		if tc.portmap != "" && (statErr != nil || !conf.Plugins[1].Capabilities["portMappings"] || !conf.Plugins[1].MasqAll) {
			t.Errorf("portmap installed: stat %v, %+v; want the binary, portMappings and masqAll", statErr, conf.Plugins[1])
		}
		if tc.portmap == "" && !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("no portmap given, yet %s is in the bin dir (%v)", PortmapPlugin, statErr)
		}
	}
	missing := Config{CNIBinDir: t.TempDir(), CNIPluginSource: plugin, PortmapSource: filepath.Join(src, "nope")}
	if err := InstallPlugin(missing); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("InstallPlugin with a missing portmap: %v, want an error naming it", err)
	}
}

// installCNI removes the temporary file an earlier start's interrupted conflist write
// left in the CNI conf dir once it is older than cniConfTempAge, and nothing of other
// tools' there (their *.tmp files, conflists).
func TestInstallCNIRemovesItsOldTemporaryFile(t *testing.T) {
	src := t.TempDir()
	plugin := filepath.Join(src, "myelin-cni")
	if err := os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{CNIBinDir: t.TempDir(), CNIConfDir: t.TempDir(), StateDir: "/run/myelin", CNIPluginSource: plugin}
	ours, others := filepath.Join(cfg.CNIConfDir, ".tmp-0123456789abcdef"), filepath.Join(cfg.CNIConfDir, "10-other.conflist.tmp")
	old := time.Now().Add(-2 * cniConfTempAge)
	for _, f := range []string{ours, others} {
		if err := os.WriteFile(f, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := installCNI(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted write's %s is still there (stat: %v)", ours, err)
	}
	if _, err := os.Stat(others); err != nil {
		t.Errorf("another tool's %s was removed: %v", others, err)
	}
}

// The plugin is installed without following a link planted in the host's CNI bin dir
// (agents wrote the fixed name myelin-cni.tmp before: root would have written the
// plugin over the link's target), and dst ends up a regular file, not the link.
func TestInstallPluginFollowsNoPlantedLink(t *testing.T) {
	src := t.TempDir()
	plugin := filepath.Join(src, "myelin-cni")
	if err := os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "10-other.conflist")
	if err := os.WriteFile(victim, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{CNIBinDir: t.TempDir(), CNIPluginSource: plugin}
	dst := filepath.Join(cfg.CNIBinDir, "myelin-cni")
	if err := os.Symlink(victim, dst+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := InstallPlugin(cfg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "{}" {
		t.Errorf("the planted link's target now holds %q (%v), want it untouched", b, err)
	}
	st, err := os.Lstat(dst)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed plugin: %v %v, want a regular file of mode 0755", st, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "#!/bin/true\n" {
		t.Errorf("installed plugin holds %q, want the source's bytes", b)
	}
	if _, err := os.Lstat(dst + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the planted %s.tmp is still there (lstat: %v)", dst, err)
	}
}
