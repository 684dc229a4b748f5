// Package nodelayout names where myelin keeps its things on a node: the agent's state
// and socket, its BPF pins, and the CNI plugin and network configuration it installs.
// The agent, the lab, the bench and the CLI all read these names from here. A real node
// uses them as they are; lab nodes share one kernel, so the lab gives each node its own
// directory below them (PerNode).
package nodelayout

import "path/filepath"

const (
	// StateDir holds the agent's endpoint records, IPAM state and API socket.
	StateDir = "/run/myelin"
	// BPFFSDir holds the agent's pinned BPF maps and program links (a bpffs).
	BPFFSDir = "/sys/fs/bpf/myelin"
	// CNIBinDir is where the agent installs the myelin-cni plugin.
	CNIBinDir = "/opt/cni/bin"
	// CNIConfDir is where the agent installs its CNI network configuration.
	CNIConfDir = "/etc/cni/net.d"
	// CNIConfFile is the conflist the agent installs; its low number sorts it before
	// other networks' files, and the runtime uses the first.
	CNIConfFile = "05-myelin.conflist"
)

// PerNode is dir for one of several nodes sharing a kernel: dir/<node>.
func PerNode(dir, node string) string { return filepath.Join(dir, node) }
