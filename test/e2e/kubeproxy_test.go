package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabKubeProxyServices: with kube-proxy-replacement false the lab runs kube-proxy
// on every node, in each of its modes (iptables, nftables); myelin leaves Services to
// it and says so, and the nodes run legacy host routing so kube-proxy's rules see pod
// traffic.
func TestLabKubeProxyServices(t *testing.T) {
	requireRoot(t)
	for _, mode := range labplan.KubeProxyModes {
		t.Run(mode, func(t *testing.T) { checkKubeProxyServices(t, mode) })
	}
}

func checkKubeProxyServices(t *testing.T, mode string) {
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native", "--kube-proxy", mode)
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	for _, n := range []string{n1, n2} {
		expectHostRouting(t, n, "Legacy", "kube-proxy-replacement is false")
		st := agentStatus(t, n)
		if !strings.HasPrefix(st.KubeProxy, "kube-proxy") {
			t.Errorf("%s: status says Services are served by %q, want kube-proxy", n, st.KubeProxy)
		}
		if s := servicesOf(t, n); s.ServedBy != "kube-proxy" || len(s.Frontends) != 0 {
			t.Errorf("%s: myelin services: %+v, want none programmed and kube-proxy in charge", n, s)
		}
	}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	web := runningPods(t, cs, "app=web", 2)
	c := runningPods(t, cs, "app=client", 1)[0]
	svc := createService(t, cs, "web", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })

	rules := []string{"iptables-save", "-t", "nat"}
	if mode == "nftables" {
		rules = []string{"nft", "list", "table", "ip", "kube-proxy"}
	}
	// Programmed means the Service and every backend are in the rules: before its
	// endpoints arrive, kube-proxy's rules reject connections to the Service.
	eventually(t, podTimeout, "kube-proxy's "+mode+" rules for the Service and its backends on node-1", func(context.Context) (bool, string) {
		out, err := inNode(n1, rules...)
		done := err == nil && strings.Contains(out, svc.Spec.ClusterIP)
		for _, p := range web {
			done = done && strings.Contains(out, p.Status.PodIP)
		}
		return done, lastLines(out, 3)
	})
	run := func(argv ...string) (string, error) { return inPod("client", argv...) }
	seen := serversOfAll(t, "ClusterIP via kube-proxy", run, "http://"+svc.Spec.ClusterIP+"/", c.Status.PodIP, podNames(web)...)
	expectServers(t, "ClusterIP via kube-proxy", seen, podNames(web)...)

	ext := func(argv ...string) (string, error) { return inNode(labplan.ExtNS, argv...) }
	seen = serversOfAll(t, "NodePort via kube-proxy", ext, fmt.Sprintf("http://198.18.0.11:%d/", svc.Spec.Ports[0].NodePort), "", podNames(web)...)
	expectServers(t, "NodePort via kube-proxy", seen, podNames(web)...)
	labDown(t)
}
