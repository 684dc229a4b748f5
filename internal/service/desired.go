package service

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/myelin-net/myelin/internal/datapath"
)

// FrontendType says how clients reach a frontend.
type FrontendType string

// The frontend types.
const (
	ClusterIP  FrontendType = "ClusterIP"  // the Service's cluster IP and port, from pods
	NodePort   FrontendType = "NodePort"   // this node's IP and the nodePort, from anywhere
	ExternalIP FrontendType = "ExternalIP" // one of spec.externalIPs and the port, from pods
)

// defaultAffinityTimeout is Kubernetes' default sessionAffinityConfig.clientIP.timeoutSeconds.
const defaultAffinityTimeout = 10800 * time.Second

// Backend is one endpoint address of a Service port: a pod IP and its target port.
type Backend = datapath.Backend

// Frontend is one address:port:protocol clients use to reach a Service port on this
// node, with what the datapath should do with new connections to it.
type Frontend struct {
	Key      datapath.Frontend
	Service  string // namespace/name
	PortName string
	Type     FrontendType
	// Active backends take new connections (ready ones, or the serving-terminating
	// ones when none is ready, as kube-proxy does). Sorted by address and port so every
	// node builds the same Maglev table. Empty: new connections are rejected at once.
	// With ExternalLocal, this node's come first, each part sorted.
	Active []Backend
	// ExternalLocal is externalTrafficPolicy: Local on a NodePort frontend: clients
	// from outside the node take only the first Local of Active, this node's own (none:
	// their connections are rejected); the node's pods and processes take any of
	// Active, as kube-proxy "short-circuits" traffic from the node.
	ExternalLocal bool
	Local         int
	// Terminating backends take no new connections but stay known, so connections
	// already open to them finish.
	Terminating []Backend
	// Affinity is the ClientIP session affinity timeout; 0 means no affinity.
	Affinity time.Duration
}

// Options is what Desired needs to know about this node.
type Options struct {
	NodeName string
	NodeIP   netip.Addr // the NodePort frontend address; no NodePort frontends when invalid
	// MaxFrontends and MaxSlots are what the datapath's frontend and backend slot
	// maps hold (Datapath.ServiceCapacity): a Service that needs more than either,
	// with the maps otherwise empty, is refused whole (ErrServiceTooLarge) before
	// any of it is built. Zero bounds nothing. The Watcher takes them from its Manager.
	MaxFrontends, MaxSlots int
}

// ErrServiceTooLarge is why Desired refuses a Service whose frontends, or the
// backends they hold together, would not fit in the datapath's maps even alone.
var ErrServiceTooLarge = errors.New("too large for the datapath's Service maps")

// Desired returns the frontends of svc on this node, with backends from slices (the
// Service's EndpointSlices). Headless and ExternalName Services, non-IPv4 cluster IPs
// and protocols other than TCP and UDP have none. externalTrafficPolicy: Local limits
// what clients from outside the node get on NodePort frontends, and
// internalTrafficPolicy: Local ClusterIP frontends, to this node's endpoints. A
// Service larger than o allows has none and an error wrapping ErrServiceTooLarge. The
// watcher computes the same from its cache records (desired).
func Desired(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, o Options) ([]Frontend, error) {
	return desired(newCachedService(svc), cachedSlices(slices, o.NodeName), o)
}

// cachedSlices returns the records of slices as the cache of node keeps them.
func cachedSlices(slices []*discoveryv1.EndpointSlice, node string) []*cachedSlice {
	out := make([]*cachedSlice, len(slices))
	for i, s := range slices {
		out[i] = newCachedSlice(s, node)
	}
	return out
}

// desired is Desired over cache records; their endpoints' on-node flags must be
// relative to o.NodeName. The backends of a port are collected once and shared by
// its frontends (nothing downstream changes them): a Service's memory here is its
// frontends and its endpoints, not their product.
func desired(svc *cachedService, slices []*cachedSlice, o Options) ([]Frontend, error) {
	if svc.unproxied {
		return nil, nil
	}
	name := svc.namespace + "/" + svc.name
	n, err := checkSize(name, svc, slices, o)
	if err != nil {
		return nil, err
	}
	out := make([]Frontend, 0, n)
	for _, sp := range svc.ports {
		if sp.proto == 0 || len(svc.clusterIPs)+len(svc.externalIPs) == 0 && !hasNodePort(svc, sp, o) {
			continue
		}
		// Every endpoint for external IPs, as kube-proxy gives pods for them whatever
		// the externalTrafficPolicy (it is about clients outside the cluster).
		active, terminating := backendsOf(slices, sp, false)
		fe := Frontend{Service: name, PortName: sp.name, Affinity: svc.affinity}
		if len(svc.clusterIPs) > 0 {
			fe.Type = ClusterIP
			fe.Active, fe.Terminating = active, terminating
			if svc.internalLocal {
				fe.Active, fe.Terminating = backendsOf(slices, sp, true)
			}
			for _, ip := range svc.clusterIPs {
				fe.Key = datapath.Frontend{Addr: ip, Port: sp.port, Proto: sp.proto}
				out = append(out, fe)
			}
		}
		fe.Type = ExternalIP
		fe.Active, fe.Terminating = active, terminating
		for _, ip := range svc.externalIPs {
			fe.Key = datapath.Frontend{Addr: ip, Port: sp.port, Proto: sp.proto}
			out = append(out, fe)
		}
		if hasNodePort(svc, sp, o) {
			fe.Key = datapath.Frontend{Addr: o.NodeIP, Port: sp.nodePort, Proto: sp.proto}
			fe.Type = NodePort
			if svc.externalLocal {
				fe.ExternalLocal = true
				fe.Active, fe.Terminating, fe.Local = localFirst(slices, sp, active, terminating)
			}
			out = append(out, fe)
		}
	}
	return out, nil
}

// hasNodePort reports whether service port sp has a NodePort frontend on this node.
func hasNodePort(svc *cachedService, sp cachedServicePort, o Options) bool {
	return sp.nodePort != 0 && o.NodeIP.Is4() && svc.nodePorts
}

// checkSize returns how many frontends svc has, or an error when they, or the
// backend slots they would take together, outnumber o.MaxFrontends or o.MaxSlots:
// such a Service could never be programmed whole, and building it would exhaust the
// agent's memory first (100 ports × 1,000 externalIPs × 1,000 endpoints are 100
// million backends). It counts before building anything, each frontend of a port as
// taking every endpoint backendsOf may give it (ready, serving or terminating; for
// internalTrafficPolicy: Local ClusterIPs, this node's only) of the slices that serve
// the port (slicePort), duplicates and all: at most what it takes.
func checkSize(name string, svc *cachedService, slices []*cachedSlice, o Options) (int, error) {
	usable := make([]portEndpoints, len(slices))
	for i, s := range slices {
		usable[i] = usableEndpoints(s)
	}
	frontends, slots := 0, uint64(0)
	for _, sp := range svc.ports {
		if sp.proto == 0 {
			continue
		}
		var eps portEndpoints
		for i, s := range slices {
			if _, ok := slicePort(s, sp); ok {
				eps.all += usable[i].all
				eps.local += usable[i].local
			}
		}
		others := len(svc.externalIPs)
		if hasNodePort(svc, sp, o) {
			others++
		}
		frontends += len(svc.clusterIPs) + others
		clusterEPs := eps.all
		if svc.internalLocal {
			clusterEPs = eps.local
		}
		slots = addProduct(addProduct(slots, len(svc.clusterIPs), clusterEPs), others, eps.all)
	}
	if o.MaxFrontends > 0 && frontends > o.MaxFrontends {
		return 0, fmt.Errorf("service %s: %w: it has %d frontends (ports × cluster, external and node IPs), "+
			"the node's myelin_lb_services map holds %d; nothing of it is programmed: reduce ports × externalIPs",
			name, ErrServiceTooLarge, frontends, o.MaxFrontends)
	}
	if o.MaxSlots > 0 && slots > uint64(o.MaxSlots) {
		return 0, fmt.Errorf("service %s: %w: its frontends need up to %d backend slots (each port's frontends × its endpoints), "+
			"the node's myelin_lb_slots map holds %d; nothing of it is programmed: reduce ports × externalIPs × endpoints",
			name, ErrServiceTooLarge, slots, o.MaxSlots)
	}
	return frontends, nil
}

// portEndpoints counts endpoints backendsOf may take: all of them, and those on this
// node.
type portEndpoints struct{ all, local int }

// usableEndpoints counts the endpoints of s backendsOf may take (ready, serving or
// terminating; starting pods are left out).
func usableEndpoints(s *cachedSlice) portEndpoints {
	var n portEndpoints
	for _, ep := range s.endpoints {
		if ep.has(epReady | epServing | epTerminating) {
			n.all++
			if ep.has(epOnNode) {
				n.local++
			}
		}
	}
	return n
}

// addProduct returns sum + a×b, saturated at the largest uint64.
func addProduct(sum uint64, a, b int) uint64 {
	hi, p := bits.Mul64(uint64(a), uint64(b))
	s, carry := bits.Add64(sum, p, 0)
	if hi != 0 || carry != 0 {
		return math.MaxUint64
	}
	return s
}

// backendsOf collects the endpoints of service port sp from slices: the ready ones
// are active (a terminating one too: it is ready only with publishNotReadyAddresses);
// the serving-terminating ones are active only when none is ready, and
// otherwise kept as terminating, as are terminating endpoints that no longer serve
// (known, so that their open connections go on, but never chosen: a pod that is both
// terminating and unready takes no new connection, as upstream's Services tests
// require). Endpoints that are neither (starting pods) are left out. local keeps only
// endpoints on this node.
func backendsOf(records []*cachedSlice, sp cachedServicePort, local bool) (active, terminating []Backend) {
	var ready, serving, closing []Backend
	seen := map[Backend]bool{}
	for _, s := range records {
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		for _, ep := range s.endpoints {
			if local && !ep.has(epOnNode) {
				continue
			}
			b := Backend{Addr: netip.AddrFrom4(ep.addr), Port: port}
			if seen[b] {
				continue
			}
			seen[b] = true
			// Ready counts whatever else holds, as for kube-proxy: the EndpointSlice
			// controller marks a terminating endpoint ready only for a Service with
			// publishNotReadyAddresses, which asks for exactly that.
			switch {
			case ep.has(epReady):
				ready = append(ready, b)
			case ep.has(epServing):
				serving = append(serving, b)
			case ep.has(epTerminating):
				closing = append(closing, b)
			}
		}
	}
	sortBackends(ready)
	sortBackends(serving)
	sortBackends(closing)
	// Clipped: the lists are shared by a port's frontends, and an append to one
	// must copy rather than write into another's.
	if len(ready) == 0 {
		return slices.Clip(serving), slices.Clip(closing)
	}
	return slices.Clip(ready), slices.Clip(slices.Concat(serving, closing)) // nil when both are
}

// localFirst orders the backends of an externalTrafficPolicy: Local frontend: the
// node's active ones (by backendsOf's choice among them alone, so a node whose local
// endpoints are all terminating still serves outside clients with them) come first,
// then the rest of active, and terminating keeps what is in neither. It returns them
// with the number of local ones. A local serving-terminating endpoint that leads the
// local pool while other nodes have ready ones is thereby also a choice of the
// node's own clients: kube-proxy would give those the ready ones only.
func localFirst(records []*cachedSlice, sp cachedServicePort, active, terminating []Backend) ([]Backend, []Backend, int) {
	local, _ := backendsOf(records, sp, true)
	if len(local) == 0 {
		return active, terminating, 0
	}
	isLocal := make(map[Backend]bool, len(local))
	for _, b := range local {
		isLocal[b] = true
	}
	ordered := slices.Clone(local)
	for _, b := range active {
		if !isLocal[b] {
			ordered = append(ordered, b)
		}
	}
	var rest []Backend
	for _, b := range terminating {
		if !isLocal[b] {
			rest = append(rest, b)
		}
	}
	return ordered, rest, len(local)
}

// slicePort finds sp's target port in slice s: the port with sp's name and protocol.
func slicePort(s *cachedSlice, sp cachedServicePort) (uint16, bool) {
	if !s.ipv4 {
		return 0, false
	}
	for _, p := range s.ports {
		if p.name == sp.name && p.proto == sp.proto && p.port != 0 {
			return p.port, true
		}
	}
	return 0, false
}

func sortBackends(bs []Backend) {
	slices.SortFunc(bs, func(a, b Backend) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}

// FrontendString returns addr:port/PROTO for logs and the CLI.
func FrontendString(f datapath.Frontend) string {
	p := "proto-" + strconv.Itoa(int(f.Proto))
	switch f.Proto {
	case unix.IPPROTO_TCP:
		p = "TCP"
	case unix.IPPROTO_UDP:
		p = "UDP"
	}
	return netip.AddrPortFrom(f.Addr, f.Port).String() + "/" + p
}
