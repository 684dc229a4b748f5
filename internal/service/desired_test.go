package service

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/datapath"
)

var nodeOpts = Options{NodeName: "node-1", NodeIP: netip.MustParseAddr("198.18.0.11")}

func svcWith(mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

type ep struct {
	ip, node                    string
	ready, serving, terminating *bool
}

func slice(port int32, portName string, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			NodeName:   ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating},
		})
	}
	return s
}

func be(s string) Backend {
	ap := netip.MustParseAddrPort(s)
	return Backend{Addr: ap.Addr(), Port: ap.Port()}
}

func TestDesired(t *testing.T) {
	etpLocal := svcWith(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	yes, no := ptr.To(true), ptr.To(false)
	ready := func(ip, node string) ep { return ep{ip: ip, node: node, ready: yes} }
	terminating := func(ip, node string) ep { return ep{ip: ip, node: node, ready: no, serving: yes, terminating: yes} }
	clusterIP := datapath.Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: unix.IPPROTO_TCP}
	nodePort := datapath.Frontend{Addr: nodeOpts.NodeIP, Port: 30080, Proto: unix.IPPROTO_TCP}

	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   []Frontend
	}{{
		name:   "ClusterIP, ready backends sorted, terminating kept apart",
		svc:    svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"), terminating("10.244.1.9", "node-1"), ready("10.244.1.5", "node-1"))},
		want: []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP,
			Active: []Backend{be("10.244.1.5:8080"), be("10.244.2.5:8080")}, Terminating: []Backend{be("10.244.1.9:8080")}}},
	}, {
		name:   "no ready backend: serving-terminating ones take connections",
		svc:    svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", terminating("10.244.1.9", "node-1"), ep{ip: "10.244.1.7", node: "node-1", ready: no})},
		want:   []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP, Active: []Backend{be("10.244.1.9:8080")}}},
	}, {
		name: "terminating and unready: known for its connections, never chosen",
		svc:  svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ep{ip: "10.244.1.9", node: "node-1", ready: no, serving: no, terminating: yes},
			terminating("10.244.1.8", "node-1"))},
		want: []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP,
			Active: []Backend{be("10.244.1.8:8080")}, Terminating: []Backend{be("10.244.1.9:8080")}}},
	}, {
		name:   "terminating but ready (publishNotReadyAddresses): active, as for kube-proxy",
		svc:    svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ep{ip: "10.244.1.9", node: "node-1", ready: yes, serving: no, terminating: yes})},
		want:   []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP, Active: []Backend{be("10.244.1.9:8080")}}},
	}, {
		name:   "only terminating and unready: no backend takes connections",
		svc:    svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ep{ip: "10.244.1.9", node: "node-1", ready: no, serving: no, terminating: yes})},
		want: []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP,
			Terminating: []Backend{be("10.244.1.9:8080")}}},
	}, {
		name: "externalIPs: a frontend per IPv4 address with every endpoint, also with externalTrafficPolicy Local",
		svc: svcWith(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"203.0.113.250", "2001:db8::1"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"))},
		want: []Frontend{
			{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP, Active: []Backend{be("10.244.2.5:8080")}},
			{Key: datapath.Frontend{Addr: netip.MustParseAddr("203.0.113.250"), Port: 80, Proto: unix.IPPROTO_TCP},
				Service: "default/web", PortName: "http", Type: ExternalIP, Active: []Backend{be("10.244.2.5:8080")}}},
	}, {
		name: "service-proxy-name label: another proxy serves it, no frontend",
		svc: svcWith(func(s *corev1.Service) {
			s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "foo-bar"}
		}),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"))},
		want:   nil,
	}, {
		name:   "headless label: not proxied, no frontend",
		svc:    svcWith(func(s *corev1.Service) { s.Labels = map[string]string{"service.kubernetes.io/headless": ""} }),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"))},
		want:   nil,
	}, {
		name:   "no endpoints: a frontend with no backend, so it rejects",
		svc:    svcWith(nil),
		slices: nil,
		want:   []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP}},
	}, {
		name:   "port matched by name: other ports' slices ignored",
		svc:    svcWith(nil),
		slices: []*discoveryv1.EndpointSlice{slice(9090, "metrics", ready("10.244.1.5", "node-1"))},
		want:   []Frontend{{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP}},
	}, {
		name: "NodePort with externalTrafficPolicy Local and ClientIP affinity",
		svc: svcWith(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"), ready("10.244.1.5", "node-1"), ready("10.244.0.5", "node-2"))},
		want: []Frontend{
			{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP, Affinity: time.Minute,
				Active: []Backend{be("10.244.0.5:8080"), be("10.244.1.5:8080"), be("10.244.2.5:8080")}},
			// The node's own first: outside clients take those, its pods and processes any.
			{Key: nodePort, Service: "default/web", PortName: "http", Type: NodePort, Affinity: time.Minute,
				Active: []Backend{be("10.244.1.5:8080"), be("10.244.0.5:8080"), be("10.244.2.5:8080")}, ExternalLocal: true, Local: 1},
		},
	}, {
		name:   "externalTrafficPolicy Local without a local endpoint: the node's clients still get every one",
		svc:    etpLocal,
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"), terminating("10.244.2.9", "node-2"))},
		want: []Frontend{
			{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP,
				Active: []Backend{be("10.244.2.5:8080")}, Terminating: []Backend{be("10.244.2.9:8080")}},
			{Key: nodePort, Service: "default/web", PortName: "http", Type: NodePort,
				Active: []Backend{be("10.244.2.5:8080")}, Terminating: []Backend{be("10.244.2.9:8080")}, ExternalLocal: true},
		},
	}, {
		name:   "externalTrafficPolicy Local with only terminating local endpoints: they serve outside clients",
		svc:    etpLocal,
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.2.5", "node-2"), terminating("10.244.1.9", "node-1"))},
		want: []Frontend{
			{Key: clusterIP, Service: "default/web", PortName: "http", Type: ClusterIP,
				Active: []Backend{be("10.244.2.5:8080")}, Terminating: []Backend{be("10.244.1.9:8080")}},
			{Key: nodePort, Service: "default/web", PortName: "http", Type: NodePort,
				Active: []Backend{be("10.244.1.9:8080"), be("10.244.2.5:8080")}, ExternalLocal: true, Local: 1},
		},
	}, {
		name:   "headless Service: nothing",
		svc:    svcWith(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		slices: []*discoveryv1.EndpointSlice{slice(8080, "http", ready("10.244.1.5", "node-1"))},
	}, {
		name:   "SCTP port: nothing",
		svc:    svcWith(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolSCTP }),
		slices: nil,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Desired(tc.svc, tc.slices, nodeOpts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, func(a, b Frontend) bool {
				return a.Key == b.Key && a.Service == b.Service && a.PortName == b.PortName && a.Type == b.Type &&
					a.Affinity == b.Affinity && slices.Equal(a.Active, b.Active) && slices.Equal(a.Terminating, b.Terminating) &&
					a.ExternalLocal == b.ExternalLocal && a.Local == b.Local
			}) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDesiredDefaultAffinityTimeout(t *testing.T) {
	got, err := Desired(svcWith(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }), nil, nodeOpts)
	if err != nil || len(got) != 1 || got[0].Affinity != 3*time.Hour {
		t.Fatalf("got %+v, %v; want one frontend with the 10800 s default affinity", got, err)
	}
}
