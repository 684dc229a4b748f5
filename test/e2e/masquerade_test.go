package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// curlExternal fetches the external host from a pod and returns the client address
// the server saw.
func curlExternal(t *testing.T, pod string) string {
	t.Helper()
	out, err := inPod(pod, "curl", "-sS", "-m", "5", "http://203.0.113.10/")
	if err != nil || !strings.HasPrefix(out, "server="+labplan.ExtNS+" client=") {
		t.Fatalf("curl the external host from %s: %v %q", pod, err, out)
	}
	return strings.TrimSpace(strings.TrimPrefix(out, "server="+labplan.ExtNS+" client="))
}

// TestLabMyelinMasquerade: pods reach the external host with their node's IP as
// source, through BPF masquerade (node-1, BPF host routing) and iptables masquerade
// (node-2, which falls back to legacy host routing with the reason); traffic inside the
// cluster and to a non-masquerade CIDR keeps the pod IP; 1,000 concurrent UDP flows from
// one node get distinct ports and every reply comes back.
func TestLabMyelinMasquerade(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createNodeConfig(t, "iptables-masq", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"enable-bpf-masquerade": "false"})
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "BPF host routing requires BPF masquerade")
	if st := agentStatus(t, n2); !strings.HasPrefix(st.Masquerade, "iptables") {
		t.Errorf("node-2 masquerading %q, want iptables", st.Masquerade)
	}
	if st := agentStatus(t, n1); !strings.HasPrefix(st.Masquerade, "BPF") || st.Routing.HostRouting != "BPF" {
		t.Errorf("node-1 masquerading %q host routing %s, want BPF and BPF", st.Masquerade, st.Routing.HostRouting)
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "client2", n2, map[string]string{"app": "client2"}, "sleep", "infinity")
	createPod(t, cs, "web", n2, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080")
	clientIP := runningPods(t, cs, "app=client", 1)[0].Status.PodIP
	runningPods(t, cs, "app=client2", 1)
	web := runningPods(t, cs, "app=web", 1)[0]

	if got := curlExternal(t, "client"); got != "198.18.0.11" {
		t.Errorf("external host saw %s from a node-1 pod (BPF masquerade), want the node IP 198.18.0.11", got)
	}
	if got := curlExternal(t, "client2"); got != "198.18.0.12" {
		t.Errorf("external host saw %s from a node-2 pod (iptables masquerade), want the node IP 198.18.0.12", got)
	}
	// Inside the cluster the pod IP stays.
	out, err := inPod("client", "curl", "-sS", "-m", "5", "http://"+web.Status.PodIP+":8080/")
	if err != nil || !strings.Contains(out, "client="+clientIP) {
		t.Errorf("pod to pod across nodes: %v %q, want the server to see %s", err, out, clientIP)
	}

	// A non-masquerade CIDR keeps the pod IP; the router learns the way back to node-1's pods.
	if out, err := inNode(labplan.NetNS, "ip", "route", "add", "10.244.0.0/16", "via", "198.18.0.11"); err != nil {
		t.Fatalf("route back to pods in the lab router: %v %s", err, out)
	}
	setConfig(t, cs, "non-masquerade-cidrs", "192.0.2.128/25,203.0.113.0/24")
	restartAgent(t, n1)
	if got := curlExternal(t, "client"); got != clientIP {
		t.Errorf("external host in a non-masquerade CIDR saw %s, want the pod IP %s", got, clientIP)
	}
	podSourceFromHosts(t, cs, n1, clientIP)
	setConfig(t, cs, "non-masquerade-cidrs", "")
	restartAgent(t, n1)

	out, err = inPod("client", myelinBin, "lab", "udp-flows", "--to", "203.0.113.10:80", "--flows", "1000")
	var res labtools.UDPFlowsResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("udp-flows: %v %q", err, out)
	}
	if res.Replies != 1000 || res.SeenSources != 1000 || len(res.SourceIPs) != 1 || res.SourceIPs[0] != "198.18.0.11" {
		t.Errorf("1,000 UDP flows: %+v; want 1000 replies from 1000 distinct node-IP sources", res)
	}
	labDown(t)
}

// podSourceFromHosts: with node's pods reaching a CIDR outside the cluster with
// their own addresses, pod-source-from-hosts "auto" leaves the uplink's check of
// the node's PodCIDR off (status names the key) and a host on the underlay posing
// as the node's pod at clientIP reaches another pod of the node; "drop" turns the
// check on there (status names the PodCIDR, the forgery is dropped on the
// uplink) and the pod still reaches that CIDR with its own address.
func podSourceFromHosts(t *testing.T, cs kubernetes.Interface, node, clientIP string) {
	t.Helper()
	createPod(t, cs, "near", node, map[string]string{"app": "near"}, "sleep", "infinity")
	near := runningPods(t, cs, "app=near", 1)[0]
	client := runningPods(t, cs, "app=client", 1)[0]
	if st := agentStatus(t, node).SourceCheck; st.UplinkPodCIDR != "" || !strings.Contains(st.UplinkOff, "non-masquerade-cidrs") {
		t.Errorf("%s source check %+v with a non-masquerade CIDR outside the cluster, want the uplink's off, naming non-masquerade-cidrs", node, st)
	}
	forgeFromUnderlay(t, client, near, false)

	setConfig(t, cs, "pod-source-from-hosts", "drop")
	restartAgent(t, node)
	nodeObj, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := agentStatus(t, node).SourceCheck; st.UplinkPodCIDR != nodeObj.Spec.PodCIDR {
		t.Errorf("%s source check %+v with pod-source-from-hosts drop, want its PodCIDR %s checked", node, st, nodeObj.Spec.PodCIDR)
	}
	forgeFromUnderlay(t, client, near, true)
	if got := curlExternal(t, "client"); got != clientIP {
		t.Errorf("external host in a non-masquerade CIDR saw %s with the uplink check on, want the pod IP %s", got, clientIP)
	}
	setConfig(t, cs, "pod-source-from-hosts", "auto")
}
