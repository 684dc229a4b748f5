package service

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// slimForCache is the informers' transform: it drops from each Service and
// EndpointSlice, before the cache keeps it, what Desired and DesiredHealthCheck never
// read: managed fields, annotations and owner references, and each endpoint's target
// reference, hostname, zone and hints. With 10,000 Services of 10 endpoints that is
// most of the agent's memory. Other objects (tombstones) pass unchanged.
func slimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		o.ManagedFields, o.Annotations, o.OwnerReferences = nil, nil, nil
	case *discoveryv1.EndpointSlice:
		o.ManagedFields, o.Annotations, o.OwnerReferences = nil, nil, nil
		for i := range o.Endpoints {
			ep := &o.Endpoints[i]
			ep.TargetRef, ep.Hostname, ep.Zone, ep.Hints, ep.DeprecatedTopology = nil, nil, nil, nil, nil
		}
	}
	return obj, nil
}
