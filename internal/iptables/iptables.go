package iptables

import (
	"fmt"
	"os/exec"
	"strings"
)

// run runs iptables with the xtables lock (-w) and returns its output; an error
// carries the arguments and what iptables said.
func run(args ...string) (string, error) {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("iptables %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ensureJump inserts "-j chain" first in table/from unless it is there.
func ensureJump(table, from, chain string) error {
	if _, err := run("-t", table, "-C", from, "-j", chain); err != nil {
		if _, err := run("-t", table, "-I", from, "1", "-j", chain); err != nil {
			return err
		}
	}
	return nil
}

// removeChain deletes every jump from table/from to chain, then the chain; a chain
// that does not exist is no error.
func removeChain(table, from, chain string) error {
	for {
		if _, err := run("-t", table, "-D", from, "-j", chain); err != nil {
			break
		}
	}
	_, _ = run("-t", table, "-F", chain)
	if _, err := run("-t", table, "-X", chain); err != nil && !strings.Contains(err.Error(), "No chain") &&
		!strings.Contains(err.Error(), "does not exist") {
		return err
	}
	return nil
}
