package iptables

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// MasqueradeChain is myelin's own chain in the nat table; POSTROUTING jumps to it.
const MasqueradeChain = "MYELIN-POSTROUTING"

// MasqueradeRules renders the iptables-restore input that replaces myelin's nat chain
// atomically: RETURN for each no-masquerade destination, then MASQUERADE for the rest
// of the cluster's pod traffic.
func MasqueradeRules(cluster netip.Prefix, keep []netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", MasqueradeChain)
	for _, p := range keep {
		fmt.Fprintf(&b, "-A %s -d %s -j RETURN\n", MasqueradeChain, p)
	}
	fmt.Fprintf(&b, "-A %s -s %s -m comment --comment \"myelin: masquerade pod traffic leaving the cluster\" -j MASQUERADE\n", MasqueradeChain, cluster)
	b.WriteString("COMMIT\n")
	return b.String()
}

// SyncMasquerade installs (or updates) the nat chain and the jump to it.
func SyncMasquerade(cluster netip.Prefix, keep []netip.Prefix) error {
	cmd := exec.Command("iptables-restore", "-w", "--noflush")
	cmd.Stdin = bytes.NewBufferString(MasqueradeRules(cluster, keep))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore %s: %s", MasqueradeChain, strings.TrimSpace(string(out)))
	}
	return ensureJump("nat", "POSTROUTING", MasqueradeChain)
}

// RemoveMasquerade removes the nat chain and its jump (BPF masquerade or none).
func RemoveMasquerade() error { return removeChain("nat", "POSTROUTING", MasqueradeChain) }
