package relay

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Peer is one agent's Hubble server.
type Peer struct {
	Name    string // the node's name
	Address string // host:port
}

// ParsePeer reads a --peer value: "name=host:port" or "host:port" (named by its address).
func ParsePeer(s string) (Peer, error) {
	name, addr, named := strings.Cut(s, "=")
	if !named {
		addr = s
		name = s
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || name == "" {
		return Peer{}, fmt.Errorf("--peer %q: want host:port or name=host:port (e.g. node-1=198.18.0.11:4244)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Peer{}, fmt.Errorf("--peer %q: port %q is not 1-65535", s, port)
	}
	return Peer{Name: name, Address: addr}, nil
}

// PeersFromNodes is every Node with an InternalIP, at port, sorted by name.
func PeersFromNodes(nodes []corev1.Node, port int) []Peer {
	var out []Peer
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				out = append(out, Peer{Name: n.Name, Address: net.JoinHostPort(a.Address, strconv.Itoa(port))})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Discovery lists the peers now.
type Discovery func(ctx context.Context) ([]Peer, error)

// Static is a fixed list of peers.
func Static(peers []Peer) Discovery {
	return func(context.Context) ([]Peer, error) { return peers, nil }
}

// FromNodes lists the cluster's Nodes on each call.
func FromNodes(cs kubernetes.Interface, port int) Discovery {
	return func(ctx context.Context) ([]Peer, error) {
		nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		return PeersFromNodes(nl.Items, port), nil
	}
}
