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
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		svc.Spec.HealthCheckNodePort <= 0 || svc.Spec.HealthCheckNodePort > 65535 {
		return HealthCheck{}, false
	}
	hc := HealthCheck{Namespace: svc.Namespace, Name: svc.Name, Port: uint16(svc.Spec.HealthCheckNodePort)}
	seen := map[string]bool{}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Ports) == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if !ready || terminating || ep.NodeName == nil || *ep.NodeName != node || len(ep.Addresses) == 0 {
				continue
			}
			// Like kube-proxy: an endpoint is its first address; one pod serving
			// several ports counts once.
			seen[ep.Addresses[0]] = true
		}
	}
	hc.LocalEndpoints = len(seen)
	return hc, true
}
