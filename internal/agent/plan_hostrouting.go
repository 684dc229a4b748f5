package agent

import (
	"fmt"
	"strings"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
)

// hostRoutingDecision is the host-routing mode a node runs in and why.
type hostRoutingDecision struct {
	BPF    bool
	Reason string
}

// Mode is "BPF" or "Legacy", as status shows it.
func (d hostRoutingDecision) Mode() string {
	if d.BPF {
		return "BPF"
	}
	return "Legacy"
}

// decideHostRouting applies host-routing: auto picks BPF when every requirement holds
// and otherwise legacy with the reason; bpf refuses to start when a requirement fails.
func decideHostRouting(c config.Config, f datapath.Features, userRules []string) (hostRoutingDecision, error) {
	var unmet []string
	if missing := f.Missing(); len(missing) > 0 {
		unmet = append(unmet, "the kernel lacks "+strings.Join(missing, ", "))
	}
	if c.UserIPTablesGuard == config.GuardRefuse && len(userRules) > 0 {
		unmet = append(unmet, fmt.Sprintf("user-defined firewall rules were found in %s, which BPF host routing would bypass (user-iptables-guard is refuse: remove them, or set it to warn)",
			strings.Join(userRules, ", ")))
	}
	if c.EnableIPv4Masquerade && !c.EnableBPFMasquerade {
		unmet = append(unmet, "BPF host routing requires BPF masquerade (enable-ipv4-masquerade is true and enable-bpf-masquerade is false)")
	}
	if !c.KubeProxyReplacement {
		unmet = append(unmet, "kube-proxy-replacement is false: kube-proxy's Service rules live in the node's iptables/nftables, which BPF host routing would bypass")
	}
	switch c.HostRouting {
	case config.HostRoutingLegacy:
		return hostRoutingDecision{false, "host-routing is legacy (" + c.Source("host-routing") + ")"}, nil
	case config.HostRoutingBPF:
		if len(unmet) > 0 {
			return hostRoutingDecision{}, fmt.Errorf("host-routing is bpf (%s) but %s; set host-routing to auto or legacy, or fix the requirement",
				c.Source("host-routing"), strings.Join(unmet, "; "))
		}
		return hostRoutingDecision{true, "host-routing is bpf (" + c.Source("host-routing") + ")"}, nil
	default:
		if len(unmet) > 0 {
			return hostRoutingDecision{false, "fell back to legacy: " + strings.Join(unmet, "; ")}, nil
		}
		return hostRoutingDecision{true, "auto: every requirement of BPF host routing is met"}, nil
	}
}
