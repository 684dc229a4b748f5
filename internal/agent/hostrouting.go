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
func decideHostRouting(c config.Config, f datapath.Features) (hostRoutingDecision, error) {
	var unmet []string
	if missing := f.Missing(); len(missing) > 0 {
		unmet = append(unmet, "the kernel lacks "+strings.Join(missing, ", "))
	}
	if c.EnableIPv4Masquerade && !c.EnableBPFMasquerade {
		unmet = append(unmet, "BPF host routing requires BPF masquerade (enable-ipv4-masquerade is true and enable-bpf-masquerade is false)")
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

// checkRoutingMode refuses configurations this build cannot run.
func checkRoutingMode(c config.Config) error {
	if c.RoutingMode == config.RoutingTunnel {
		return fmt.Errorf("routing-mode is tunnel (%s), which this build of myelin-agent does not implement yet; set routing-mode: native in the ConfigMap %s/%s",
			c.Source("routing-mode"), config.ConfigMapNamespace, config.ConfigMapName)
	}
	return nil
}
