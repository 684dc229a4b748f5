package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// healthAnswer is what a healthCheckNodePort answers (kube-proxy's body).
type healthAnswer struct {
	Code    int
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints int `json:"localEndpoints"`
}

// probeHealth GETs http://ip:port/ from the external host, as a load balancer would.
func probeHealth(ip string, port int32) (healthAnswer, string, error) {
	url := fmt.Sprintf("http://%s:%d/healthz", ip, port)
	out, err := inNode(labplan.ExtNS, "curl", "-sS", "-m", "5", "-w", "\n%{http_code}", url)
	var a healthAnswer
	if err != nil {
		return a, out, err
	}
	body, code, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if a.Code, err = strconv.Atoi(strings.TrimSpace(code)); err != nil {
		return a, out, fmt.Errorf("no status code in %q", out)
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		return a, out, fmt.Errorf("body %q: %w", body, err)
	}
	return a, out, nil
}

// expectHealth waits until ip's health check port answers code with count local
// endpoints of default/name.
func expectHealth(t *testing.T, ip string, port int32, name string, code, count int) {
	t.Helper()
	what := fmt.Sprintf("health check %s:%d answers %d with localEndpoints %d", ip, port, code, count)
	eventually(t, time.Minute, what, func(context.Context) (bool, string) {
		a, out, err := probeHealth(ip, port)
		if err != nil {
			return false, fmt.Sprintf("%v %q", err, out)
		}
		ok := a.Code == code && a.LocalEndpoints == count && a.Service.Namespace == "default" && a.Service.Name == name
		return ok, out
	})
}

// pinDeployment moves Deployment name's pods to node and sets its replicas.
func pinDeployment(t *testing.T, cs kubernetes.Interface, name, node string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = &replicas
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLabMyelinHealthCheckNodePort: an externalTrafficPolicy: Local LoadBalancer
// Service's healthCheckNodePort, served by the agents (kube-proxy-replacement) on a
// BPF host routing node (node-1) and a legacy one (node-2), probed from the external
// host as a load balancer would: 200 with the local endpoint count where the backend
// runs, 503 elsewhere and once it is gone, and the port closed when the Service goes.
// The lab runs the agents with their least-privilege RBAC, checked here too.
func TestLabMyelinHealthCheckNodePort(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	ip1, ip2 := "198.18.0.11", "198.18.0.12"
	createNodeConfig(t, "legacy-node-2", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"host-routing": "legacy"})
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "host-routing is legacy")

	d := backendDeployment("hc", 1)
	d.Spec.Template.Spec.TopologySpreadConstraints = nil
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n1}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPods(t, cs, "app=hc", 1)
	svc := createService(t, cs, "hc", "hc", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	hcnp := svc.Spec.HealthCheckNodePort
	if hcnp == 0 {
		t.Fatalf("the apiserver allocated no healthCheckNodePort: %+v", svc.Spec)
	}

	t.Run("backend on node-1", func(t *testing.T) {
		expectHealth(t, ip1, hcnp, "hc", 200, 1)
		expectHealth(t, ip2, hcnp, "hc", 503, 0)
		// The Service itself answers through node-1's NodePort (traffic policy Local).
		url := fmt.Sprintf("http://%s:%d/", ip1, svc.Spec.Ports[0].NodePort)
		if out, err := inNode(labplan.ExtNS, "curl", "-sS", "-m", "5", url); err != nil || !strings.HasPrefix(out, "server=hc-") {
			t.Errorf("NodePort %s from the external host: %v %q", url, err, out)
		}
	})
	t.Run("scaled to zero", func(t *testing.T) {
		scale(t, cs, "hc", 0)
		runningPods(t, cs, "app=hc", 0)
		expectHealth(t, ip1, hcnp, "hc", 503, 0)
		expectHealth(t, ip2, hcnp, "hc", 503, 0)
	})
	t.Run("backend on node-2 (legacy host routing)", func(t *testing.T) {
		pinDeployment(t, cs, "hc", n2, 1)
		runningPods(t, cs, "app=hc", 1)
		expectHealth(t, ip2, hcnp, "hc", 200, 1)
		expectHealth(t, ip1, hcnp, "hc", 503, 0)
	})
	t.Run("Service deleted: port closed", func(t *testing.T) {
		if err := cs.CoreV1().Services("default").Delete(context.Background(), "hc", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{ip1, ip2} {
			eventually(t, time.Minute, fmt.Sprintf("health check port %s:%d closed", ip, hcnp), func(context.Context) (bool, string) {
				_, out, err := probeHealth(ip, hcnp)
				return err != nil && (strings.Contains(out, "Couldn't connect") || strings.Contains(out, "refused")), out
			})
		}
	})
	t.Run("agent RBAC is least privilege", func(t *testing.T) {
		checkAgentRBAC(t, cs, n1, n2)
	})
	t.Run("missing ConfigMap is said", func(t *testing.T) {
		checkMissingConfigMap(t, cs, n2)
	})
	labDown(t)
}
