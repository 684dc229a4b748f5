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
	ClusterIP FrontendType = "ClusterIP" // the Service's cluster IP and port, from pods
	NodePort  FrontendType = "NodePort"  // this node's IP and the nodePort, from anywhere
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
	Active []Backend
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
// NodePort frontends, and internalTrafficPolicy: Local ClusterIP frontends, to this
// node's endpoints.
func Desired(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, o Options) []Frontend {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	name := svc.Namespace + "/" + svc.Name
	var affinity time.Duration
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		affinity = defaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	var out []Frontend
	for _, sp := range svc.Spec.Ports {
		proto, ok := protoNumber(sp.Protocol)
		if !ok {
			continue
		}
		fe := Frontend{Service: name, PortName: sp.Name, Affinity: affinity}
		for _, ip := range clusterIPs(svc) {
			fe.Key = datapath.Frontend{Addr: ip, Port: uint16(sp.Port), Proto: proto}
			fe.Type = ClusterIP
			local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
			fe.Active, fe.Terminating = backendsOf(slices, sp, local, o.NodeName)
			out = append(out, fe)
		}
		if sp.NodePort != 0 && o.NodeIP.Is4() &&
			(svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			fe.Key = datapath.Frontend{Addr: o.NodeIP, Port: uint16(sp.NodePort), Proto: proto}
			fe.Type = NodePort
			local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
			fe.Active, fe.Terminating = backendsOf(slices, sp, local, o.NodeName)
			out = append(out, fe)
		}
	}
	return out
}

func protoNumber(p corev1.Protocol) (uint8, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return unix.IPPROTO_TCP, true
	case corev1.ProtocolUDP:
		return unix.IPPROTO_UDP, true
	}
	return 0, false
}

// clusterIPs returns the Service's IPv4 cluster IPs; none for headless Services.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			out = append(out, ip)
		}
	}
	return out
}

// backendsOf collects the endpoints of service port sp from slices: the ready ones
// are active; the serving-terminating ones are active only when none is ready, and
// otherwise kept as terminating. Endpoints that are neither (starting pods) are left
// out. local keeps only endpoints on node.
func backendsOf(slices []*discoveryv1.EndpointSlice, sp corev1.ServicePort, local bool, node string) (active, terminating []Backend) {
	var ready, serving []Backend
	seen := map[Backend]bool{}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if local && (ep.NodeName == nil || *ep.NodeName != node) {
				continue
			}
			isReady := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			isServing := ep.Conditions.Serving == nil && isReady || ep.Conditions.Serving != nil && *ep.Conditions.Serving
			isTerminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				b := Backend{Addr: ip, Port: port}
				if err != nil || !ip.Is4() || seen[b] {
					continue
				}
				seen[b] = true
				switch {
				case isReady && !isTerminating:
					ready = append(ready, b)
				case isServing || isTerminating:
					serving = append(serving, b)
				}
			}
		}
	}
	sortBackends(ready)
	sortBackends(serving)
	if len(ready) == 0 {
		return serving, nil
	}
	return ready, serving
}

// slicePort finds sp's target port in slice s: the port with sp's name and protocol.
func slicePort(s *discoveryv1.EndpointSlice, sp corev1.ServicePort) (uint16, bool) {
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		spProto := sp.Protocol
		if spProto == "" {
			spProto = corev1.ProtocolTCP
		}
		if name == sp.Name && proto == spProto && p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			return uint16(*p.Port), true
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
