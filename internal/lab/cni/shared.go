package cni

import (
	"os"
	"os/user"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ReferencePluginDir is where Debian's containernetworking-plugins installs the
// reference plugins (bridge, host-local, portmap).
const ReferencePluginDir = "/usr/lib/cni"

// ReferencePluginFix is how to install the reference plugins.
const ReferencePluginFix = "install containernetworking-plugins (make setup)"

// ToolCache is the tool cache outside the repository, where scripts/build-k8s.sh and
// scripts/build-flannel.sh put what they build: $MYELIN_CACHE, else
// $XDG_CACHE_HOME/myelin, else ~/.cache/myelin (scripts/versions.sh's rule).
func ToolCache() string {
	cache := os.Getenv("MYELIN_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil { // no $HOME (e.g. a bare CI environment): the passwd entry's
				if u, uerr := user.Current(); uerr == nil {
					home = u.HomeDir
				}
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "myelin")
	}
	return cache
}

// InstallConfList writes a conflist into a node's CNI configuration directory,
// atomically, and reports whether it changed anything (an identical file is kept).
func InstallConfList(dir, file string, conf []byte) (changed bool, err error) {
	path := filepath.Join(dir, file)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(conf) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if err := os.WriteFile(path+".tmp", conf, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(path+".tmp", path)
}

// Create runs a create call, treating AlreadyExists as done (the lab bootstraps once,
// but a restarted supervisor may run it again) and retrying while the apiserver's
// bootstrap (namespaces, RBAC) is still settling.
func Create(f func() error) error {
	var err error
	for range 30 {
		err = f()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}

// ReferencePlugins are the reference plugins among a flavour's tools (by name, e.g.
// "bridge"): the plugins its conflist calls, which a node whose runtime looks only in
// the node's own CNI bin dir (containerd) needs linked there. A flavour that installs
// its own plugin (myelin) has none.
func ReferencePlugins(tools []Tool) []string {
	var names []string
	for _, t := range tools {
		if filepath.Dir(t.Path) == ReferencePluginDir {
			names = append(names, filepath.Base(t.Path))
		}
	}
	return names
}
