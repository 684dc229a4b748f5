package clusterdns

import (
	"net/netip"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func objectsOf(t *testing.T, o Options) (*appsv1.Deployment, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatalf("options %+v: %v", o, err)
	}
	var d *appsv1.Deployment
	var s *corev1.Service
	var cm *corev1.ConfigMap
	for _, obj := range o.Objects() {
		switch v := obj.(type) {
		case *appsv1.Deployment:
			d = v
		case *corev1.Service:
			s = v
		case *corev1.ConfigMap:
			cm = v
		}
	}
	if d == nil || s == nil || cm == nil {
		t.Fatalf("objects lack the deployment, service or configmap: %v %v %v", d, s, cm)
	}
	return d, s, cm
}

func TestObjectsImage(t *testing.T) {
	o := Options{ServiceIP: netip.MustParseAddr("10.96.0.10"), Domain: "cluster.local", Replicas: 1, Image: "myelin/coredns:v1.12.4"}
	d, s, cm := objectsOf(t, o)
	if s.Name != "kube-dns" || s.Namespace != "kube-system" || s.Spec.ClusterIP != "10.96.0.10" || s.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Errorf("service %s/%s ip %s selector %v, want kube-system/kube-dns 10.96.0.10 k8s-app=kube-dns", s.Namespace, s.Name, s.Spec.ClusterIP, s.Spec.Selector)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != o.Image || c.ImagePullPolicy != corev1.PullNever || len(c.Command) != 0 || c.ReadinessProbe == nil {
		t.Errorf("container %+v, want the image, never pulled, its entrypoint, a readiness probe", c)
	}
	if d.Spec.Template.Spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %s, want Default (CoreDNS must not resolve through itself)", d.Spec.Template.Spec.DNSPolicy)
	}
	if !strings.Contains(cm.Data["Corefile"], "kubernetes cluster.local in-addr.arpa") || strings.Contains(cm.Data["Corefile"], "kubeconfig") {
		t.Errorf("in-cluster Corefile:\n%s", cm.Data["Corefile"])
	}
}

func TestObjectsHostBinary(t *testing.T) {
	o := Options{ServiceIP: netip.MustParseAddr("10.96.0.10"), Domain: "cluster.local", Replicas: 1,
		HostBinary: "/cache/coredns", HostCorefile: "/lab/coredns/Corefile", Kubeconfig: "/lab/kubeconfig"}
	d, _, _ := objectsOf(t, o)
	c := d.Spec.Template.Spec.Containers[0]
	if strings.Join(c.Command, " ") != "/cache/coredns -conf /lab/coredns/Corefile" {
		t.Errorf("command %q, want the host binary with the Corefile", c.Command)
	}
	if !strings.Contains(o.Corefile(), "kubeconfig /lab/kubeconfig myelin-lab") {
		t.Errorf("host Corefile lacks the kubeconfig:\n%s", o.Corefile())
	}
}

func TestValidate(t *testing.T) {
	good := Options{ServiceIP: netip.MustParseAddr("10.96.0.10"), Domain: "cluster.local", Replicas: 1, Image: "x"}
	for name, mut := range map[string]func(*Options){
		"service IP": func(o *Options) { o.ServiceIP = netip.Addr{} },
		"domain":     func(o *Options) { o.Domain = "" },
		"replicas":   func(o *Options) { o.Replicas = 0 },
		"binary":     func(o *Options) { o.Image = "" },
	} {
		o := good
		mut(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), strings.Fields(name)[0]) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
}
