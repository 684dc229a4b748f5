package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestLabMyelinFlows makes known traffic on a 2-node lab (a TCP connection between
// pods of different nodes, a ClusterIP connection, a DNS query to a resolver pod, a
// connection a NetworkPolicy drops) and finds each in `myelin observe -o json`,
// resolved to pods, labels, nodes and the Service.
func TestLabMyelinFlows(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createPod(t, cs, "flow-client", n1, map[string]string{"app": "flow-client"}, "sleep", "infinity")
	createPod(t, cs, "flow-server", n2, map[string]string{"app": "flow-server"}, myelinBin, "lab", "serve", "--listen", ":8080")
	createPod(t, cs, "flow-dns", n2, map[string]string{"app": "flow-dns"}, myelinBin, "lab", "dns", "serve", "--answer", "198.51.100.7")
	server := runningPods(t, cs, "app=flow-server", 1)[0]
	dns := runningPods(t, cs, "app=flow-dns", 1)[0]
	runningPods(t, cs, "app=flow-client", 1)
	svc := createService(t, cs, "flow-web", "flow-server", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	client := func(argv ...string) (string, error) { return inPod("flow-client", argv...) }

	checkTCP(t, "flow-client", client, server.Status.PodIP, "flow-server")
	if out, err := client("curl", "-sS", "-m", "5", "http://"+svc.Spec.ClusterIP+"/"); err != nil {
		t.Errorf("curl the ClusterIP: %v %s", err, out)
	}
	if out, err := client(myelinBin, "lab", "dns", "query", "--server", dns.Status.PodIP+":53", "web.flows.test"); err != nil || strings.TrimSpace(out) != "198.51.100.7" {
		t.Errorf("DNS query to the resolver pod: %v %q", err, out)
	}
	denyIngress(t, cs, "flow-server")
	eventually(t, time.Minute, "the policy drops connections to flow-server", func(context.Context) (bool, string) {
		out, err := client("curl", "-sS", "-m", "1", fmt.Sprintf("http://%s:8080/", server.Status.PodIP))
		return err != nil, out
	})

	expectFlow(t, "pod-to-pod SYN", []string{"--from-pod", "flow-client", "--to-pod", "flow-server", "--protocol", "tcp", "--verdict", "forwarded"},
		func(f *flow.Flow) bool {
			return f.TCPFlags != nil && f.TCPFlags.SYN && !f.TCPFlags.ACK && f.DstPort == 8080 && f.Node == n1 &&
				f.Direction == flow.Egress && f.Source.Labels["app"] == "flow-client" && f.Destination.Node == n2 && f.HostRouting == "bpf"
		})
	expectFlow(t, "the same connection arriving on node 2", []string{"--node", n2, "--to-pod", "flow-server", "--port", "8080"},
		func(f *flow.Flow) bool { return f.Direction == flow.Ingress && f.TCPFlags != nil && f.TCPFlags.SYN })
	expectFlow(t, "ClusterIP connection", []string{"--to-service", "default/flow-web"},
		func(f *flow.Flow) bool {
			return f.Destination.Pod == "flow-server" && f.DstPort == 8080 && f.TCPFlags != nil && f.TCPFlags.SYN
		})
	expectFlow(t, "DNS query", []string{"--type", "dns", "--from-pod", "flow-client"},
		func(f *flow.Flow) bool { return f.DNS != nil && !f.DNS.Response && f.DNS.Query == "web.flows.test." })
	expectFlow(t, "DNS response", []string{"--type", "dns", "--from-pod", "flow-dns"},
		func(f *flow.Flow) bool {
			return f.DNS != nil && f.DNS.Response && len(f.DNS.IPs) == 1 && f.DNS.IPs[0] == "198.51.100.7"
		})
	expectFlow(t, "policy drop", []string{"--verdict", "DROPPED", "--to-pod", "flow-server"},
		func(f *flow.Flow) bool {
			return f.Type == flow.TypeDrop && f.DropReason == "DROP_POLICY_DENIED" && f.Source.Pod == "flow-client"
		})
	expectFlow(t, "policy verdict of the drop", []string{"--type", "policy_verdict", "--to-pod", "flow-server"},
		func(f *flow.Flow) bool { return f.Verdict == flow.Dropped && f.Source.Pod == "flow-client" })
	if out, err := myelin("observe", "--pod", "flow-server"); err == nil {
		t.Logf("myelin observe --pod flow-server:\n%s", out)
	}
	if out, err := myelin("observe", "--verdict", "maybe"); err == nil || !strings.Contains(out, `--verdict "maybe"`) {
		t.Errorf("observe --verdict maybe: %v %q, want an error naming the filter", err, out)
	}
}

// denyIngress isolates the pods labelled app=app for ingress, allowing nothing.
func denyIngress(t *testing.T, cs kubernetes.Interface, app string) {
	t.Helper()
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-" + app},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("default").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// expectFlow waits until `myelin observe -o json` with filters shows a flow that match accepts.
func expectFlow(t *testing.T, what string, filters []string, match func(*flow.Flow) bool) {
	t.Helper()
	args := append([]string{"observe", "-o", "json", "--last", "4095"}, filters...)
	eventually(t, 30*time.Second, what+" in myelin observe", func(context.Context) (bool, string) {
		out, err := myelin(args...)
		if err != nil {
			return false, fmt.Sprintf("myelin %v: %v %s", args, err, out)
		}
		var seen []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := new(flow.Flow)
			if line == "" || json.Unmarshal([]byte(line), f) != nil {
				continue
			}
			if match(f) {
				return true, ""
			}
			seen = append(seen, line)
		}
		return false, fmt.Sprintf("%d flows, none matching:\n%s", len(seen), lastLines(strings.Join(seen, "\n"), 10))
	})
}
