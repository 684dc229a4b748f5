package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/nodelayout"
	"github.com/myelin-net/myelin/internal/statefile"
)

// installCNI copies the myelin-cni binary into the node's CNI bin dir and writes the
// conflist pointing the plugin at this agent's socket. Both writes are atomic renames,
// so a runtime never sees half a file.
func installCNI(cfg Config) error {
	if err := InstallPlugin(cfg); err != nil {
		return err
	}
	version := cfg.CNIVersion
	if version == "" {
		version = "1.0.0"
	}
	b, err := json.MarshalIndent(conflist(cfg, version), "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.CNIConfDir, 0o755); err != nil {
		return err
	}
	// A crash mid-write (an earlier start's) left its temporary file: runtimes ignore
	// it, but it would stay for good. Others' files live here too: only ours go.
	if err := statefile.RemoveOwnTemporaryOlder(cfg.CNIConfDir, cniConfTempAge); err != nil {
		return err
	}
	return statefile.Write(filepath.Join(cfg.CNIConfDir, nodelayout.CNIConfFile), b, 0o644)
}

// cniConfTempAge is the age past which a temporary file of ours in the CNI conf dir is
// an interrupted write's: another agent of the node (an upgrade's overlap) may be
// writing the conflist right now, for milliseconds.
const cniConfTempAge = time.Minute

// PortmapPlugin is the name the upstream portmap plugin is installed under in the CNI
// bin dir: a name of our own, so a portmap another CNI installed is neither replaced nor
// removed by --cleanup.
const PortmapPlugin = "myelin-portmap"

// conflist is the network configuration the agent installs: myelin-cni, then, when a
// portmap plugin is installed (Config.PortmapSource), portmap for pods' hostPorts. The
// runtime passes a pod's port mappings to it (capability portMappings); it writes DNAT
// rules in the netns the runtime runs in (the node's). masqAll: the connections it
// DNATs are masqueraded too, so the pod replies to this node and the reply meets
// netfilter's conntrack, which undoes the DNAT. With BPF host routing a reply to
// another address would leave the pod by bpf_redirect_neigh, past netfilter, with the
// pod's address as its source (docs/install.md, cni.hostPort).
func conflist(cfg Config, version string) map[string]any {
	plugins := []any{map[string]any{"type": "myelin-cni", "socket": cfg.socket()}}
	if cfg.PortmapSource != "" {
		plugins = append(plugins, map[string]any{"type": PortmapPlugin, "masqAll": true,
			"capabilities": map[string]bool{"portMappings": true}})
	}
	return map[string]any{
		// 1.0.0 by default: containerd 1.6 (Debian bookworm) rejects 1.1.0 results; the
		// plugin speaks both, and a runtime that wants STATUS/GC asks with 1.1.0 itself.
		"cniVersion": version,
		"name":       "myelin",
		"plugins":    plugins,
	}
}

// withdrawConflist removes the conflist this agent wrote (only nodelayout.CNIConfFile
// in the conf dir; other CNIs' files stay), so the runtime reports the network not
// ready and the node gets no pods while no datapath would serve them. A missing file
// is not an error; the next agent that starts writes it again.
func withdrawConflist(cfg Config) error {
	path := filepath.Join(cfg.CNIConfDir, nodelayout.CNIConfFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove conflist %s: %w", path, err)
	}
	return nil
}

// InstallPlugin copies the myelin-cni binary, and the portmap plugin when one is given,
// into the node's CNI bin dir (what the chart's init container runs: myelin-agent
// --install-cni-plugin).
func InstallPlugin(cfg Config) error {
	if err := os.MkdirAll(cfg.CNIBinDir, 0o755); err != nil {
		return fmt.Errorf("create CNI bin dir: %w", err)
	}
	// An interrupted copy (an earlier start's crash) left its temporary file; as in
	// the conf dir, only ours go, and only once no other agent can be writing it.
	if err := statefile.RemoveOwnTemporaryOlder(cfg.CNIBinDir, cniConfTempAge); err != nil {
		return err
	}
	if err := copyFile(cfg.CNIPluginSource, filepath.Join(cfg.CNIBinDir, "myelin-cni"), 0o755); err != nil {
		return fmt.Errorf("install the CNI plugin from %s: %w; build it with make build or pass --cni-plugin", cfg.CNIPluginSource, err)
	}
	if cfg.PortmapSource == "" {
		return nil
	}
	if err := copyFile(cfg.PortmapSource, filepath.Join(cfg.CNIBinDir, PortmapPlugin), 0o755); err != nil {
		return fmt.Errorf("install the portmap plugin from %s: %w; build it with make setup (scripts/build-cni-plugins.sh) or leave --portmap-plugin empty", cfg.PortmapSource, err)
	}
	return nil
}

// copyFile installs src as dst through statefile.WriteFrom: a temporary file of its
// own name, created exclusively and never through a symlink (the bin dir is the
// host's: a link planted at a fixed name like dst+".tmp" would have root write the
// plugin over its target), synced before the rename, so after a power loss the
// runtime finds the old plugin or the new one, never an empty file it cannot run.
// Before this, agents wrote dst+".tmp"; one a crash left is removed (not followed).
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.Remove(dst + ".tmp"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return statefile.WriteFrom(dst, in, mode)
}
