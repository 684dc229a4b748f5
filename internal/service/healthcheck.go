package service

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// HealthCheck is what a Service's healthCheckNodePort answers on this node, as
// kube-proxy serves it: external load balancers send traffic for an
// externalTrafficPolicy: Local Service only to nodes that answer 200, i.e. nodes
// with a ready endpoint of it.
type HealthCheck struct {
	Namespace, Name string
	Port            uint16 // spec.healthCheckNodePort
	// LocalEndpoints counts the distinct addresses of the Service's ready,
	// non-terminating endpoints on this node (kube-proxy's count: serving-terminating
	// endpoints still take traffic but make the node unhealthy, so load balancers
	// drain it).
	LocalEndpoints int
}

// DesiredHealthCheck returns the health check svc needs on node, with its endpoints
// from slices; false when it needs none. Only LoadBalancer Services with
// externalTrafficPolicy: Local have a healthCheckNodePort (the apiserver allocates it).
func DesiredHealthCheck(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, node string) (HealthCheck, bool) {
	return desiredHealthCheck(newCachedService(svc), cachedSlices(slices, node))
}

// desiredHealthCheck is DesiredHealthCheck over cache records, whose endpoints'
// on-node flags say which node it is for.
func desiredHealthCheck(svc *cachedService, slices []*cachedSlice) (HealthCheck, bool) {
	if !svc.loadBalancer || !svc.externalLocal || svc.healthCheckPort <= 0 || svc.healthCheckPort > 65535 {
		return HealthCheck{}, false
	}
	hc := HealthCheck{Namespace: svc.namespace, Name: svc.name, Port: uint16(svc.healthCheckPort)}
	seen := map[[4]byte]bool{}
	for _, s := range slices {
		if !s.ipv4 || len(s.ports) == 0 {
			continue
		}
		for _, ep := range s.endpoints {
			// One pod serving several ports counts once.
			if ep.has(epReady) && !ep.has(epTerminating) && ep.has(epOnNode) {
				seen[ep.addr] = true
			}
		}
	}
	hc.LocalEndpoints = len(seen)
	return hc, true
}
