package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/lab"
)

// runFlannelNetwork stands in for kube-flannel's install-cni step and flannel's CNI
// plugin in --cni flannel mode: once the node's flanneld has written its subnet file it
// installs the bridge + host-local conflist for that subnet, and keeps it in step if
// the file changes. Until then the node has no CNI configuration and stays NotReady,
// as a real node does before its flannel pod runs.
func runFlannelNetwork(ctx context.Context, cfg Config, log *slog.Logger) {
	var last error
	for {
		err := installFlannelConf(cfg, log)
		if err != nil && (last == nil || err.Error() != last.Error()) {
			log.Info("waiting for flanneld's subnet file", "err", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// installFlannelConf writes the conflist for the subnet file's current content; it
// does nothing when the installed conflist already matches.
func installFlannelConf(cfg Config, log *slog.Logger) error {
	file := cfg.Paths.FlannelSubnetFile(cfg.Node.Name)
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist yet", file)
	}
	if err != nil {
		return err
	}
	subnet, err := lab.ParseFlannelSubnet(b)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	conf, err := lab.FlannelConfList(subnet, cfg.Paths.IPAMDir(cfg.Node.Name))
	if err != nil {
		return err
	}
	path := filepath.Join(cfg.cniConfDir(), lab.FlannelConfFile)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(conf) {
		return nil
	}
	if err := os.MkdirAll(cfg.cniConfDir(), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", conf, 0o644); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	log.Info("flannel network installed", "subnet", subnet.Subnet, "network", subnet.Network, "mtu", subnet.MTU, "conf", path)
	return nil
}
