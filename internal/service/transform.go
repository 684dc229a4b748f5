package service

import (
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The informers keep, for each Service and EndpointSlice, only the small record
// Desired and DesiredHealthCheck read (cachedService, cachedSlice) instead of the API
// object: with 10,000 Services of 10 endpoints the objects, even without their managed
// fields, were most of the agent's memory. The records are made by the informers'
// transform (cacheTransform) before the cache stores anything, so a full object lives
// only while it is decoded.

// cachedService is what the agent keeps of a Service.
type cachedService struct {
	namespace, name string
	unproxied       bool // type ExternalName, or a label that leaves it to another proxy: no frontends
	nodePorts       bool // type NodePort or LoadBalancer: nodePorts are served
	loadBalancer    bool
	affinity        time.Duration // ClientIP session affinity timeout, 0: none
	clusterIPs      []netip.Addr  // IPv4 only
	externalIPs     []netip.Addr  // spec.externalIPs, IPv4 only; none for headless Services
	ports           []cachedServicePort
	internalLocal   bool // internalTrafficPolicy: Local
	externalLocal   bool // externalTrafficPolicy: Local
	healthCheckPort int32
}

// cachedServicePort is one port of a Service; proto 0 is a protocol the datapath
// does not serve (SCTP).
type cachedServicePort struct {
	name           string
	proto          uint8
	port, nodePort uint16
}

// cachedSlice is what the agent keeps of an EndpointSlice.
type cachedSlice struct {
	namespace, name string
	service         string // namespace/name of its Service; "" when unlabelled
	ipv4            bool   // addressType IPv4; other slices keep no endpoints
	ports           []cachedSlicePort
	endpoints       []cachedEndpoint
}

// cachedSlicePort is one port of an EndpointSlice; port 0 is an unusable one.
type cachedSlicePort struct {
	name  string
	proto uint8
	port  uint16
}

// cachedEndpoint is one IPv4 address of an endpoint with the endpoint's conditions
// and whether it is on this node: 8 bytes instead of an Endpoint's ~200.
type cachedEndpoint struct {
	addr  [4]byte
	flags endpointFlags
}

type endpointFlags uint8

const (
	epReady       endpointFlags = 1 << iota // conditions.ready (nil counts as true)
	epServing                               // conditions.serving (nil: as ready)
	epTerminating                           // conditions.terminating
	epOnNode                                // nodeName is this node
)

func (e cachedEndpoint) has(f endpointFlags) bool { return e.flags&f != 0 }

// GetObjectMeta makes the records keyable by the informers' cache (meta.Accessor).
func (s *cachedService) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.namespace, Name: s.name}
}

// GetObjectMeta makes the records keyable by the informers' cache (meta.Accessor).
func (s *cachedSlice) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.namespace, Name: s.name}
}

// cacheTransform returns the informers' transform for node: Services and
// EndpointSlices become their records; records and other objects (tombstones) pass
// unchanged, since client-go may hand an object to the transform more than once.
func cacheTransform(node string) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Service:
			return newCachedService(o), nil
		case *discoveryv1.EndpointSlice:
			return newCachedSlice(o, node), nil
		}
		return obj, nil
	}
}

func newCachedService(svc *corev1.Service) *cachedService {
	s := &cachedService{
		namespace:       svc.Namespace,
		name:            svc.Name,
		unproxied:       svc.Spec.Type == corev1.ServiceTypeExternalName || leftToOthers(svc.Labels),
		nodePorts:       svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer,
		loadBalancer:    svc.Spec.Type == corev1.ServiceTypeLoadBalancer,
		clusterIPs:      clusterIPs(svc),
		externalIPs:     externalIPs(svc),
		internalLocal:   svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		externalLocal:   svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		healthCheckPort: svc.Spec.HealthCheckNodePort,
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		s.affinity = defaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			s.affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	s.ports = make([]cachedServicePort, len(svc.Spec.Ports))
	for i, sp := range svc.Spec.Ports {
		s.ports[i] = cachedServicePort{name: sp.Name, proto: protoNumber(sp.Protocol), port: uint16(sp.Port), nodePort: uint16(sp.NodePort)}
	}
	return s
}

// The labels by which a Service asks kube-proxy (and so myelin, which replaces it) to
// leave it alone: service-proxy-name names another proxy that serves it, headless
// marks it as not proxied (whatever its spec).
const (
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	labelHeadless         = "service.kubernetes.io/headless"
)

// leftToOthers says whether a Service's labels leave it to another proxy or to none,
// as kube-proxy reads them (the presence of either label).
func leftToOthers(labels map[string]string) bool {
	_, named := labels[labelServiceProxyName]
	_, headless := labels[labelHeadless]
	return named || headless
}

// clusterIPs returns the Service's IPv4 cluster IPs; none for headless Services.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	return ipv4s(ips)
}

// externalIPs returns the Service's IPv4 external IPs; none for a headless Service,
// which is never proxied.
func externalIPs(svc *corev1.Service) []netip.Addr {
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	return ipv4s(svc.Spec.ExternalIPs)
}

func ipv4s(ips []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			out = append(out, ip)
		}
	}
	return out
}

func newCachedSlice(es *discoveryv1.EndpointSlice, node string) *cachedSlice {
	s := &cachedSlice{namespace: es.Namespace, name: es.Name, ipv4: es.AddressType == discoveryv1.AddressTypeIPv4}
	if name := es.Labels[discoveryv1.LabelServiceName]; name != "" {
		s.service = es.Namespace + "/" + name
	}
	if !s.ipv4 {
		return s
	}
	s.ports = make([]cachedSlicePort, len(es.Ports))
	for i, p := range es.Ports {
		cp := cachedSlicePort{proto: unix.IPPROTO_TCP}
		if p.Name != nil {
			cp.name = *p.Name
		}
		if p.Protocol != nil {
			cp.proto = protoNumber(*p.Protocol)
		}
		if p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			cp.port = uint16(*p.Port)
		}
		s.ports[i] = cp
	}
	// An endpoint is its first address, as kube-proxy takes it (the API calls them
	// fungible and lets clients use the first only): its up to 100 addresses made
	// one hand-made slice 100,000 backends on every node.
	s.endpoints = make([]cachedEndpoint, 0, len(es.Endpoints))
	for _, ep := range es.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		ip, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil || !ip.Is4() {
			continue
		}
		flags := endpointConditions(ep.Conditions)
		if ep.NodeName != nil && *ep.NodeName == node {
			flags |= epOnNode
		}
		s.endpoints = append(s.endpoints, cachedEndpoint{addr: ip.As4(), flags: flags})
	}
	return s
}

// endpointConditions turns an endpoint's conditions into flags, with the API's
// defaults for unset ones: ready when unknown, serving as ready.
func endpointConditions(c discoveryv1.EndpointConditions) endpointFlags {
	var f endpointFlags
	ready := c.Ready == nil || *c.Ready
	if ready {
		f |= epReady
	}
	if c.Serving == nil && ready || c.Serving != nil && *c.Serving {
		f |= epServing
	}
	if c.Terminating != nil && *c.Terminating {
		f |= epTerminating
	}
	return f
}

// protoNumber returns the IP protocol number of a Service protocol the datapath
// serves (TCP, the default, and UDP), 0 for others.
func protoNumber(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolTCP, "":
		return unix.IPPROTO_TCP
	case corev1.ProtocolUDP:
		return unix.IPPROTO_UDP
	}
	return 0
}
