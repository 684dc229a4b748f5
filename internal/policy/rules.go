package policy

import (
	"fmt"

	"github.com/myelin-net/myelin/internal/datapath"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// policyName is "namespace/name" of np.
func policyName(np *networkingv1.NetworkPolicy) string { return np.Namespace + "/" + np.Name }

// selects says whether np applies to pod (same namespace, podSelector matches).
func selects(sels selectorSet, np *networkingv1.NetworkPolicy, pod Pod) bool {
	if np.Namespace != pod.Namespace {
		return false
	}
	ok, err := sels.matches(&np.Spec.PodSelector, pod.Labels)
	return err == nil && ok
}

// policyTypes returns whether np isolates its pods for ingress and egress;
// no policyTypes means Ingress, plus Egress when it has egress rules (the
// API's defaulting).
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

// peerMatches says whether the rule peer pp of np matches p; c holds the
// computation's compiled ipBlocks and selectors.
func peerMatches(np *networkingv1.NetworkPolicy, pp networkingv1.NetworkPolicyPeer, p peer, c *compiled) bool {
	if pp.IPBlock != nil {
		return c.cidrs.matches(pp.IPBlock, p.atoms)
	}
	if !p.pod || (pp.PodSelector == nil && pp.NamespaceSelector == nil) {
		return false
	}
	if pp.NamespaceSelector != nil {
		if ok, err := c.selectors.matches(pp.NamespaceSelector, p.nsLabels); err != nil || !ok {
			return false
		}
	} else if p.namespace != np.Namespace {
		return false
	}
	return podSelected(pp, p, c)
}

// podSelected says whether the selector peer pp's podSelector (none: every pod)
// matches the pod p, whose namespace pp admits.
func podSelected(pp networkingv1.NetworkPolicyPeer, p peer, c *compiled) bool {
	if pp.PodSelector == nil {
		return true
	}
	ok, err := c.selectors.matches(pp.PodSelector, p.labels)
	return err == nil && ok
}

// anyPeerMatches says whether a rule with peers pps allows p; no peers allow everyone.
func anyPeerMatches(np *networkingv1.NetworkPolicy, pps []networkingv1.NetworkPolicyPeer, p peer, c *compiled) bool {
	if len(pps) == 0 {
		return true
	}
	for _, pp := range pps {
		if peerMatches(np, pp, p, c) {
			return true
		}
	}
	return false
}

// hasNamedPort says whether ports names a port.
func hasNamedPort(ports []networkingv1.NetworkPolicyPort) bool {
	for _, p := range ports {
		if p.Port != nil && p.Port.StrVal != "" {
			return true
		}
	}
	return false
}

// rulePorts returns the port ranges a rule allows; named ports resolve
// against target (the pod the traffic goes to). numeric false skips the
// numeric ports, named false the named ones. No ports: everything.
func rulePorts(ports []networkingv1.NetworkPolicyPort, target peer, numeric, named bool) ([]datapath.PolicyPort, error) {
	if len(ports) == 0 {
		if !numeric {
			return nil, nil
		}
		return []datapath.PolicyPort{{}}, nil
	}
	var out []datapath.PolicyPort
	for _, p := range ports {
		var proto corev1.Protocol
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		n, err := protoNumber(proto)
		if err != nil {
			return nil, err
		}
		switch {
		case p.Port == nil:
			if numeric {
				out = append(out, datapath.PolicyPort{Proto: n, Lo: 0, Hi: 65535})
			}
		case p.Port.StrVal != "":
			if named {
				if port, ok := target.namedPort(p.Port.StrVal, n); ok {
					out = append(out, datapath.PolicyPort{Proto: n, Lo: port, Hi: port})
				}
			}
		default:
			if !numeric {
				continue
			}
			lo, hi := p.Port.IntVal, p.Port.IntVal
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if lo < 1 || hi > 65535 || hi < lo {
				return nil, fmt.Errorf("port %d endPort %d: want 1 <= port <= endPort <= 65535", lo, hi)
			}
			out = append(out, datapath.PolicyPort{Proto: n, Lo: uint16(lo), Hi: uint16(hi)})
		}
	}
	return out, nil
}

// PortAllowed says whether ranges allow proto/port, as the datapath's
// policy_port_allowed does: a range of protocol 0 allows everything, else the
// protocol and a port within the range.
func PortAllowed(ranges []datapath.PolicyPort, proto uint8, port uint16) bool {
	for _, r := range ranges {
		if r.Proto == 0 || (r.Proto == proto && port >= r.Lo && port <= r.Hi) {
			return true
		}
	}
	return false
}
