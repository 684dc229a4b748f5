package labplan

import (
	"fmt"
	"net/netip"
	"path/filepath"
)

// KubeletPort, KubeletHealthzPort are the real kubelet's ports on its node's IP
// (--runtime containerd): the API the apiserver calls for exec and logs, and /healthz.
const (
	KubeletPort        = 10250
	KubeletHealthzPort = 10248
)

// KubeletClientUser is the apiserver's identity towards the kubelets (its
// --kubelet-client-certificate), authorised by the kubelets' Webhook mode.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// ContainerdConfig renders a node's containerd configuration (version 2, containerd
// 1.6): its own root, state, sockets, runc root and CNI dirs, the locally built pause
// image, and the settings a node that shares a kernel (and lacks CAP_SYS_RESOURCE) needs.
func ContainerdConfig(paths Paths, node string, pauseImage string) string {
	return fmt.Sprintf(`# Written by myelin lab up (--runtime containerd) for %[1]s.
version = 2
root = %[2]q
state = %[3]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[4]q

[ttrpc]
  address = %[5]q

[debug]
  address = %[6]q
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %[7]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[8]q
  # Without CAP_SYS_RESOURCE runc fails with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  # Pod netns mounts under this node's state dir, not the shared /var/run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = %[9]q

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %[10]q
  conf_dir = %[11]q
  max_conf_num = 1
`, node, paths.ContainerdRoot(node), paths.ContainerdState(node), paths.ContainerdSocket(node),
		paths.ContainerdSocket(node)+".ttrpc", filepath.Join(paths.ContainerdDir(node), "debug.sock"),
		filepath.Join(paths.ContainerdDir(node), "opt"), pauseImage, paths.RuncRoot(node),
		paths.CNIBinDir(node), paths.CNIConfDir(node))
}

// KubeletConfig renders a node's KubeletConfiguration: cgroupfs with the node's own
// cgroup root, its address and logs, x509 + Webhook authentication and Webhook
// authorization, no image GC (the imported images can't be pulled again) and no
// iptables chains of its own; pods resolve names through the cluster DNS Service at
// clusterDNS (internal/clusterdns, `myelin lab dns`).
func KubeletConfig(paths Paths, n Node, clusterDNS netip.Addr) string {
	return fmt.Sprintf(`# Written by myelin lab up (--runtime containerd) for %[1]s.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[2]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: %[2]s
healthzPort: %[4]d
containerRuntimeEndpoint: unix://%[5]s
cgroupDriver: cgroupfs
cgroupRoot: %[6]s
failCgroupV1: false
failSwapOn: false
podLogsDir: %[7]s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
registerNode: true
clusterDomain: cluster.local
clusterDNS:
- %[9]s
# Every node reports the whole machine; evict only when it is truly out of room.
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[8]s
authorization:
  mode: Webhook
`, n.Name, n.IP, KubeletPort, KubeletHealthzPort, paths.ContainerdSocket(n.Name), CgroupRoot(n.Name),
		paths.PodLogsDir(n.Name), filepath.Join(paths.PKI(), "ca.crt"), clusterDNS)
}

// KubeletArgs are a node's kubelet flags after the binary.
func KubeletArgs(paths Paths, n Node) []string {
	return []string{"--config", paths.KubeletConfig(n.Name),
		"--kubeconfig", paths.ComponentKubeconfig(n.Name),
		"--root-dir", paths.KubeletDir(n.Name),
		// The serving certificate's dir is not under --root-dir by default.
		"--cert-dir", filepath.Join(paths.KubeletDir(n.Name), "pki"),
		"--hostname-override", n.Name, "--node-ip", n.IP.String()}
}
