package service

import (
	"cmp"
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
}

// Desired returns the frontends of svc on this node, with backends from slices (the
// Service's EndpointSlices). Headless and ExternalName Services, non-IPv4 cluster IPs
// and protocols other than TCP and UDP have none. externalTrafficPolicy: Local limits
// what clients from outside the node get on NodePort frontends, and
// internalTrafficPolicy: Local ClusterIP frontends, to this node's endpoints. The
// watcher computes the same from its cache records (desired).
func Desired(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, o Options) []Frontend {
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
// relative to o.NodeName.
func desired(svc *cachedService, slices []*cachedSlice, o Options) []Frontend {
	if svc.unproxied {
		return nil
	}
	name := svc.namespace + "/" + svc.name
	var out []Frontend
	for _, sp := range svc.ports {
		if sp.proto == 0 {
			continue
		}
		fe := Frontend{Service: name, PortName: sp.name, Affinity: svc.affinity}
		for _, ip := range svc.clusterIPs {
			fe.Key = datapath.Frontend{Addr: ip, Port: sp.port, Proto: sp.proto}
			fe.Type = ClusterIP
			fe.Active, fe.Terminating = backendsOf(slices, sp, svc.internalLocal)
			out = append(out, fe)
		}
		for _, ip := range svc.externalIPs {
			// Every endpoint, as kube-proxy gives pods for external IPs whatever the
			// externalTrafficPolicy (it is about clients outside the cluster).
			fe.Key = datapath.Frontend{Addr: ip, Port: sp.port, Proto: sp.proto}
			fe.Type = ExternalIP
			fe.Active, fe.Terminating = backendsOf(slices, sp, false)
			out = append(out, fe)
		}
		if sp.nodePort != 0 && o.NodeIP.Is4() && svc.nodePorts {
			fe.Key = datapath.Frontend{Addr: o.NodeIP, Port: sp.nodePort, Proto: sp.proto}
			fe.Type = NodePort
			fe.Active, fe.Terminating = backendsOf(slices, sp, false)
			if svc.externalLocal {
				fe.ExternalLocal = true
				fe.Active, fe.Terminating, fe.Local = localFirst(slices, sp, fe.Active, fe.Terminating)
			}
			out = append(out, fe)
		}
	}
	return out
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
	if len(ready) == 0 {
		return serving, closing
	}
	return ready, slices.Concat(serving, closing) // nil when both are
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
