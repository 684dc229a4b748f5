// Package bridge is the lab's --cni bridge flavour: Debian's reference bridge and
// host-local plugins on every node, with static routes to the other nodes' PodCIDRs,
// kept by each lab kubelet as a network DaemonSet would.
package bridge
