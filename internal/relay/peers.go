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

// PeersFromNodes is every Node with an InternalIP, at port, sorted by name, and the
// Nodes refused as peers with why. A Node's addresses are what its kubelet writes, so
// a compromised node could name any host: an InternalIP that is not a unicast address
// (loopback, link-local, multicast: the relay's own host, a metadata service) is
// refused, and so is one an older Node (creationTimestamp, then name) already has,
// which would show that node's flows a second time under the liar's name.
func PeersFromNodes(nodes []corev1.Node, port int) (peers []Peer, refused []string) {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b corev1.Node) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	holder := map[netip.Addr]string{}
	for _, n := range sorted {
		ip, raw, ok := nodeInternalIP(n)
		switch {
		case !ok:
		case !ip.IsGlobalUnicast():
			refused = append(refused, fmt.Sprintf("node %s: InternalIP %q is not a unicast IP address", n.Name, raw))
		case holder[ip] != "":
			refused = append(refused, fmt.Sprintf("node %s: InternalIP %s is node %s's (created first)", n.Name, ip, holder[ip]))
		default:
			holder[ip] = n.Name
			peers = append(peers, Peer{Name: n.Name, Address: net.JoinHostPort(ip.String(), strconv.Itoa(port))})
		}
	}
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(refused)
	return peers, refused
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
		peers, refused := PeersFromNodes(nl.Items, port)
		mu.Lock()
		defer mu.Unlock()
		now := map[string]bool{}
		for _, r := range refused {
			if !logged[r] {
				log.Warn("hubble peer refused; correct the Node's addresses", "reason", r)
			}
			now[r] = true
		}
		logged = now
		return peers, nil
	}
}
