package agent

import (
	"fmt"
	"os/exec"
	"strings"
)

// forwardChain is myelin's own chain in the filter table; FORWARD jumps to it.
const forwardChain = "MYELIN-FORWARD"

func iptables(args ...string) (string, error) {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("iptables %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ensureLegacyForward accepts forwarded pod traffic of the cluster CIDR in the node's
// FORWARD chain, for legacy host routing where packets go through the kernel stack.
func ensureLegacyForward(clusterCIDR string) error {
	if _, err := iptables("-t", "filter", "-N", forwardChain); err != nil && !strings.Contains(err.Error(), "already exists") {
		return err
	}
	if _, err := iptables("-t", "filter", "-F", forwardChain); err != nil {
		return err
	}
	for _, dir := range []string{"-s", "-d"} {
		if _, err := iptables("-t", "filter", "-A", forwardChain, dir, clusterCIDR, "-m", "comment",
			"--comment", "myelin: legacy host routing of pod traffic", "-j", "ACCEPT"); err != nil {
			return err
		}
	}
	if _, err := iptables("-t", "filter", "-C", "FORWARD", "-j", forwardChain); err != nil {
		if _, err := iptables("-t", "filter", "-I", "FORWARD", "1", "-j", forwardChain); err != nil {
			return err
		}
	}
	return nil
}

// removeLegacyForward removes the chain and its jump (BPF host routing needs neither).
func removeLegacyForward() error {
	for {
		if _, err := iptables("-t", "filter", "-D", "FORWARD", "-j", forwardChain); err != nil {
			break
		}
	}
	_, _ = iptables("-t", "filter", "-F", forwardChain)
	if _, err := iptables("-t", "filter", "-X", forwardChain); err != nil && !strings.Contains(err.Error(), "No chain") &&
		!strings.Contains(err.Error(), "does not exist") {
		return err
	}
	return nil
}
