package policy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's named ports are its containers' and then its sidecars' (init containers
// with restartPolicy Always, as Kubernetes resolves a Service's named targetPort
// since 1.32); a plain init container's are not (it has exited before the pod
// serves). Unnamed ports and unknown protocols are left out.
func TestPodNamedPorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080}, {ContainerPort: 9999}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "odd", ContainerPort: 7, Protocol: "ICMP"},
		}}},
		InitContainers: []corev1.Container{
			{Name: "setup", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000}}},
			{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{
				{Name: "https", ContainerPort: 9443}, {Name: "http", ContainerPort: 15001},
			}},
		},
	}}
	want := []NamedPort{
		{Name: "http", Proto: ProtoTCP, Port: 8080}, {Name: "dns", Proto: ProtoUDP, Port: 53},
		{Name: "https", Proto: ProtoTCP, Port: 9443}, {Name: "http", Proto: ProtoTCP, Port: 15001},
	}
	got := PodWithoutIP(p)
	if !slices.Equal(got.Ports, want) {
		t.Errorf("named ports %+v, want %+v", got.Ports, want)
	}
	self := peer{ports: got.Ports}
	for _, c := range []struct {
		name string
		port uint16
		ok   bool
	}{{"https", 9443, true}, {"http", 8080, true}, {"setup", 0, false}} {
		if port, ok := self.namedPort(c.name, ProtoTCP); port != c.port || ok != c.ok {
			t.Errorf("named port %q: %d %v, want %d %v (a container's before a sidecar's)", c.name, port, ok, c.port, c.ok)
		}
	}
	if len(p.Spec.Containers) != 1 || cap(p.Spec.Containers) != 1 {
		t.Errorf("the pod's containers changed: %+v", p.Spec.Containers)
	}
}
