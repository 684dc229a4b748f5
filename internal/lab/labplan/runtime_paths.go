package labplan

import "os"

// Per-node places of --runtime containerd, all under the node's directory
// <dir>/nodes/<node>/ so that lab down removes them with the lab directory.

// NodesDir holds every node's directory. On --runtime containerd it is a shared
// mount of its own: the pods' network namespaces, which each node's containerd
// mounts below it (netns_mounts_under_state_dir), reach an agent container that
// mounts it with HostToContainer propagation (the chart's socketLB.netnsPath) after
// the agent started.
func (p Paths) NodesDir() string { return p.join("nodes") }

// ContainerdDir holds a node's containerd: config.toml, root/ and state/.
func (p Paths) ContainerdDir(node string) string { return p.join("nodes", node, "containerd") }

// ContainerdConfig is a node's containerd configuration file.
func (p Paths) ContainerdConfig(node string) string {
	return p.join("nodes", node, "containerd", "config.toml")
}

// ContainerdRoot is a node's containerd root (content store, snapshots, metadata).
func (p Paths) ContainerdRoot(node string) string {
	return p.join("nodes", node, "containerd", "root")
}

// ContainerdState is a node's containerd state dir (task state, pod netns mounts).
func (p Paths) ContainerdState(node string) string {
	return p.join("nodes", node, "containerd", "state")
}

// ContainerdSocket is a node's containerd gRPC socket (the CRI endpoint of its kubelet;
// `ctr -a` takes it).
func (p Paths) ContainerdSocket(node string) string {
	return p.join("nodes", node, "containerd", "containerd.sock")
}

// RuncRoot is where a node's runc keeps container state.
func (p Paths) RuncRoot(node string) string { return p.join("nodes", node, "containerd", "runc") }

// KubeletDir is a node's kubelet --root-dir (volumes, pod state, its serving cert).
func (p Paths) KubeletDir(node string) string { return p.join("nodes", node, "kubelet") }

// KubeletConfig is a node's KubeletConfiguration file.
func (p Paths) KubeletConfig(node string) string { return p.join("nodes", node, "kubelet.yaml") }

// PodLogsDir is a node's podLogsDir (the kubelet links /var/log/containers entries here).
func (p Paths) PodLogsDir(node string) string { return p.join("nodes", node, "pod-logs") }

// Sysctls records the machine-wide sysctls as they were before the first kubelet
// started, so the supervisor and `lab down` can put them back.
func (p Paths) Sysctls() string { return p.join("sysctls.json") }

// CgroupRoot is a node's cgroup parent (the kubelet's cgroupRoot), in every hierarchy.
func CgroupRoot(node string) string { return "/" + node }

// Cgroup2Dir is a node's cgroup in the cgroup v2 hierarchy (/sys/fs/cgroup on a
// v2-only machine, /sys/fs/cgroup/unified on a hybrid one): the lab's node processes
// start in it (Process.Cgroup) and the node's socket-LB attaches to it.
func Cgroup2Dir(node string) string {
	mnt := "/sys/fs/cgroup"
	if _, err := os.Stat(mnt + "/cgroup.controllers"); err != nil {
		mnt += "/unified"
	}
	return mnt + CgroupRoot(node)
}

// HostCgroup is the leaf under Cgroup2Dir the node's own processes (not containerd's
// pods, which the kubelet puts under Cgroup2Dir too) start in: a leaf, so a parent
// with controllers on never refuses them.
func HostCgroup(node string) string { return Cgroup2Dir(node) + "/host" }

// KubeletSharedDir is where every kubelet puts its device-plugin socket whatever its
// --root-dir (a constant of the kubelet); the lab removes it in down when it created it.
const KubeletSharedDir = "/var/lib/kubelet"

// KubeletSharedDirCreated marks that the lab created KubeletSharedDir.
func (p Paths) KubeletSharedDirCreated() string { return p.join("var-lib-kubelet.created") }

// CNICacheDir is where containerd 1.6 keeps libcni's cached results, machine-wide
// (results/<network>-<sandbox id>-<interface>); it has no per-node setting.
const CNICacheDir = "/var/lib/cni"

// CNICacheDirCreated marks that the lab created CNICacheDir.
func (p Paths) CNICacheDirCreated() string { return p.join("var-lib-cni.created") }
