package k8s

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// NodeInternalIP returns a Node's InternalIP address, or the zero Addr if it has none.
func NodeInternalIP(n *corev1.Node) netip.Addr {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				return ip
			}
		}
	}
	return netip.Addr{}
}
