package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/clusterdns"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabClusterDNS runs cluster DNS on the lab runtime (`myelin lab dns`: CoreDNS as a
// lab pod running the host's binary) and resolves a Service's name from a pod on the
// other node through the kube-dns Service's ClusterIP; the pod's answer is the
// Service's ClusterIP, and a name that doesn't exist gets NXDOMAIN. (On --runtime
// containerd, TestLabConformanceSubset checks a pod resolving through its resolv.conf.)
func TestLabClusterDNS(t *testing.T) {
	requireRoot(t)
	testenv.RequireTools(t, "busybox", lab.CoreDNSBin())
	cs := labUp(t, "--nodes", "2")
	if out, err := myelin("lab", "dns"); err != nil {
		t.Fatalf("myelin lab dns: %v\n%s", err, out)
	}
	dns, err := cs.CoreV1().Services(clusterdns.Namespace).Get(context.Background(), clusterdns.ServiceName, metav1.GetOptions{})
	if err != nil || dns.Spec.ClusterIP != "10.96.0.10" {
		t.Fatalf("service kube-system/kube-dns: %v, want ClusterIP 10.96.0.10", err)
	}
	createPod(t, cs, "web", labplan.NodeName(1), map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080")
	createPod(t, cs, "client", labplan.NodeName(2), map[string]string{"app": "client"}, "sleep", "infinity")
	runningPods(t, cs, "app=web", 1)
	runningPods(t, cs, "app=client", 1)
	svc := createService(t, cs, "web", "web", nil)
	eventually(t, time.Minute, "client resolves web through kube-dns", func(context.Context) (bool, string) {
		out, err := inPod("client", "busybox", "nslookup", "web.default.svc.cluster.local", dns.Spec.ClusterIP)
		return err == nil && strings.Contains(out, "Address: "+svc.Spec.ClusterIP), fmt.Sprintf("%v %q, want %s", err, out, svc.Spec.ClusterIP)
	})
	out, err := inPod("client", "busybox", "nslookup", "nothing.default.svc.cluster.local", dns.Spec.ClusterIP)
	if err == nil || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("nslookup of a missing Service: %v %q, want NXDOMAIN", err, out)
	}
}
