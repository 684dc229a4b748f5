package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestDesiredHealthCheck(t *testing.T) {
	lbLocal := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 31999
	}
	local := slice(8080, "http",
		ep{ip: "10.244.0.5", node: "node-1"},                                                                         // ready (nil = ready)
		ep{ip: "10.244.0.6", node: "node-1", ready: ptr.To(true)},                                                    // ready
		ep{ip: "10.244.0.7", node: "node-1", ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)}, // serving-terminating: not counted
		ep{ip: "10.244.0.8", node: "node-1", ready: ptr.To(false)},                                                   // starting: not counted
		ep{ip: "10.244.1.5", node: "node-2"},                                                                         // other node
	)
	// The same pods on a second port count once.
	secondPort := slice(9090, "metrics", ep{ip: "10.244.0.5", node: "node-1"})
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		node   string
		want   *HealthCheck
	}{
		{"LoadBalancer Local", svcWith(lbLocal), []*discoveryv1.EndpointSlice{local, secondPort}, "node-1",
			&HealthCheck{Namespace: "default", Name: "web", Port: 31999, LocalEndpoints: 2}},
		{"other node", svcWith(lbLocal), []*discoveryv1.EndpointSlice{local}, "node-2",
			&HealthCheck{Namespace: "default", Name: "web", Port: 31999, LocalEndpoints: 1}},
		{"node without endpoints", svcWith(lbLocal), []*discoveryv1.EndpointSlice{local}, "node-3",
			&HealthCheck{Namespace: "default", Name: "web", Port: 31999, LocalEndpoints: 0}},
		{"no endpoints at all", svcWith(lbLocal), nil, "node-1",
			&HealthCheck{Namespace: "default", Name: "web", Port: 31999, LocalEndpoints: 0}},
		{"LoadBalancer Cluster", svcWith(func(s *corev1.Service) {
			lbLocal(s)
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}), []*discoveryv1.EndpointSlice{local}, "node-1", nil},
		{"NodePort Local (no health check port)", svcWith(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), []*discoveryv1.EndpointSlice{local}, "node-1", nil},
		{"port not allocated", svcWith(func(s *corev1.Service) {
			lbLocal(s)
			s.Spec.HealthCheckNodePort = 0
		}), []*discoveryv1.EndpointSlice{local}, "node-1", nil},
	} {
		got, ok := DesiredHealthCheck(tc.svc, tc.slices, tc.node)
		switch {
		case tc.want == nil && ok:
			t.Errorf("%s: health check %+v, want none", tc.name, got)
		case tc.want != nil && !ok:
			t.Errorf("%s: no health check, want %+v", tc.name, *tc.want)
		case tc.want != nil && got != *tc.want:
			t.Errorf("%s: %+v, want %+v", tc.name, got, *tc.want)
		}
	}
}
