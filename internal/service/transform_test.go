package service

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The cache transform drops the bulky fields but nothing the frontends or the health
// check are computed from.
func TestSlimForCacheKeepsWhatDesiredReads(t *testing.T) {
	mkSvc := func() *corev1.Service {
		return svcWith(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 31000
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		})
	}
	mkSlice := func() *discoveryv1.EndpointSlice {
		s := slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"}, ep{ip: "10.244.2.7", node: "node-2", ready: ptr.To(false), terminating: ptr.To(true)})
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
		s.Annotations = map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-23T00:00:00Z"}
		s.OwnerReferences = []metav1.OwnerReference{{Kind: "Service", Name: "web"}}
		for i := range s.Endpoints {
			s.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}
			s.Endpoints[i].Zone, s.Endpoints[i].Hostname = ptr.To("z1"), ptr.To("web-1")
		}
		return s
	}
	svc, sl := mkSvc(), mkSlice()
	slimSvc, _ := slimForCache(mkSvc())
	slimSlice, _ := slimForCache(mkSlice())
	s2, sl2 := slimSvc.(*corev1.Service), slimSlice.(*discoveryv1.EndpointSlice)
	if s2.ManagedFields != nil || s2.Annotations != nil || sl2.ManagedFields != nil || sl2.Annotations != nil ||
		sl2.OwnerReferences != nil || sl2.Endpoints[0].TargetRef != nil || sl2.Endpoints[1].Zone != nil {
		t.Errorf("slimForCache kept bulky fields: %+v %+v", s2.ObjectMeta, sl2)
	}
	if sl2.Labels[discoveryv1.LabelServiceName] != "web" {
		t.Errorf("slimForCache dropped the service-name label the cache indexes by: %v", sl2.Labels)
	}
	want := Desired(svc, []*discoveryv1.EndpointSlice{sl}, nodeOpts)
	got := Desired(s2, []*discoveryv1.EndpointSlice{sl2}, nodeOpts)
	if len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("Desired of the slim objects = %+v, want %+v", got, want)
	}
	wantHC, ok1 := DesiredHealthCheck(svc, []*discoveryv1.EndpointSlice{sl}, "node-1")
	gotHC, ok2 := DesiredHealthCheck(s2, []*discoveryv1.EndpointSlice{sl2}, "node-1")
	if !ok1 || ok1 != ok2 || !reflect.DeepEqual(gotHC, wantHC) {
		t.Errorf("health check of the slim objects = %+v %v, want %+v %v", gotHC, ok2, wantHC, ok1)
	}
	if tomb, _ := slimForCache("other"); tomb != "other" {
		t.Errorf("slimForCache changed an unknown object: %v", tomb)
	}
}
