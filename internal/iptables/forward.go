package iptables

import (
	"net/netip"
	"strings"
)

// ForwardChain is myelin's own chain in the filter table; FORWARD jumps to it.
const ForwardChain = "MYELIN-FORWARD"

// EnsureForward accepts forwarded pod traffic of the cluster CIDR in the node's
// FORWARD chain, for legacy host routing where packets go through the kernel stack.
func EnsureForward(clusterCIDR netip.Prefix) error {
	if _, err := run("-t", "filter", "-N", ForwardChain); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	if _, err := run("-t", "filter", "-F", ForwardChain); err != nil {
		return err
	}
	for _, dir := range []string{"-s", "-d"} {
		if _, err := run("-t", "filter", "-A", ForwardChain, dir, clusterCIDR.String(), "-m", "comment",
			"--comment", "myelin: legacy host routing of pod traffic", "-j", "ACCEPT"); err != nil {
			return err
		}
	}
	return ensureJump("filter", "FORWARD", ForwardChain)
}

// RemoveForward removes the chain and its jump (BPF host routing needs neither).
func RemoveForward() error { return removeChain("filter", "FORWARD", ForwardChain) }
