package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Peer is one agent's Hubble server.
type Peer struct {
	Name    string // the node's name
	Address string // host:port
	// Refused says why the relay does not connect to the Node (PeersFromNodes); it is
	// reported unavailable with this reason. "" for a peer it connects to.
	Refused string
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

// PeersFromNodes is every Node with an InternalIP, at port, sorted by name. A Node's
// addresses are what its kubelet writes, so a compromised node could name any host:
// one whose InternalIP is not a unicast address (loopback: the relay's own host;
// multicast, unspecified, unparsable) and every Node of an InternalIP another Node
// has too (which of them is that host can't be told: its flows would show under the
// other's name) are Refused, with why.
func PeersFromNodes(nodes []corev1.Node, port int) []Peer {
	holders := map[netip.Addr][]string{}
	for _, n := range nodes {
		if ip, _, ok := nodeInternalIP(n); ok && ip.IsValid() {
			holders[ip] = append(holders[ip], n.Name)
		}
	}
	var peers []Peer
	for _, n := range nodes {
		ip, raw, ok := nodeInternalIP(n)
		if !ok {
			continue
		}
		p := Peer{Name: n.Name, Address: net.JoinHostPort(raw, strconv.Itoa(port))}
		switch {
		case !ip.IsGlobalUnicast() && !ip.IsLinkLocalUnicast():
			p.Refused = fmt.Sprintf("its InternalIP %q is not a unicast IP address", raw)
		case len(holders[ip]) > 1:
			p.Refused = fmt.Sprintf("its InternalIP %s is also Node %s's", ip, strings.Join(slices.DeleteFunc(slices.Clone(holders[ip]),
				func(h string) bool { return h == n.Name }), ", "))
		}
		peers = append(peers, p)
	}
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return peers
}

// nodeInternalIP is n's first InternalIP, parsed and as written; one that does not
// parse is the invalid Addr (refused as not unicast).
func nodeInternalIP(n corev1.Node) (ip netip.Addr, raw string, ok bool) {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			ip, _ := netip.ParseAddr(a.Address)
			return ip.Unmap(), a.Address, true
		}
	}
	return netip.Addr{}, "", false
}

// Discovery lists the peers now.
type Discovery func(ctx context.Context) ([]Peer, error)

// Static is a fixed list of peers.
func Static(peers []Peer) Discovery {
	return func(context.Context) ([]Peer, error) { return peers, nil }
}

// FromNodes lists the cluster's Nodes on each call; each refusal of a Node as a peer
// (PeersFromNodes) is logged when it first appears.
func FromNodes(cs kubernetes.Interface, port int, log *slog.Logger) Discovery {
	var mu sync.Mutex
	logged := map[string]bool{}
	return func(ctx context.Context) ([]Peer, error) {
		nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		peers := PeersFromNodes(nl.Items, port)
		mu.Lock()
		defer mu.Unlock()
		now := map[string]bool{}
		for _, p := range peers {
			if p.Refused == "" {
				continue
			}
			why := p.Name + ": " + p.Refused
			if !logged[why] {
				log.Warn("hubble peer refused; correct the Node's addresses", "node", p.Name, "reason", p.Refused)
			}
			now[why] = true
		}
		logged = now
		return peers, nil
	}
}
