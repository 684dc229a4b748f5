package flannel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// NodeNetwork stands in for kube-flannel's install-cni step and flannel's CNI
// plugin in --cni flannel mode: once the node's flanneld has written its subnet file it
// installs the bridge + host-local conflist for that subnet, and keeps it in step if
// the file changes. Until then the node has no CNI configuration and stays NotReady,
// as a real node does before its flannel pod runs.
func (Flavour) NodeNetwork(ctx context.Context, n cni.Node) {
	var last error
	for {
		err := installConf(n)
		if err != nil && (last == nil || err.Error() != last.Error()) {
			n.Log.Info("waiting for flanneld's subnet file", "err", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// installConf writes the conflist for the subnet file's current content; it
// does nothing when the installed conflist already matches.
func installConf(n cni.Node) error {
	file := n.Paths.FlannelSubnetFile(n.Node.Name)
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist yet", file)
	}
	if err != nil {
		return err
	}
	subnet, err := ParseSubnet(b)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	conf, err := ConfList(subnet, n.Paths.IPAMDir(n.Node.Name))
	if err != nil {
		return err
	}
	dir := n.Paths.CNIConfDir(n.Node.Name)
	changed, err := cni.InstallConfList(dir, ConfFile, conf)
	if err != nil || !changed {
		return err
	}
	path := filepath.Join(dir, ConfFile)
	n.Log.Info("flannel network installed", "subnet", subnet.Subnet, "network", subnet.Network, "mtu", subnet.MTU, "conf", path)
	return nil
}
