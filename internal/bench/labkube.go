package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
)

// benchNamespace holds the bench's pods in a lab; its NodeConfigs are in
// config.ConfigMapNamespace, the only namespace agents read them from.
const benchNamespace = "default"

// kubeClients talk to a lab's API server.
type kubeClients struct {
	*labdriver.Driver
	cs kubernetes.Interface
}

func newKubeClients(paths labplan.Paths) (*kubeClients, error) {
	d, err := labdriver.New(paths)
	if err != nil {
		return nil, err
	}
	return &kubeClients{Driver: d, cs: d.Kube}, nil
}

// A labPod is a running pod: where its network namespace is and its address.
type labPod struct {
	NetNS string // path of the pod's network namespace
	IP    netip.Addr
}

// runPods creates one idle host-command pod per name on the given node (name → node)
// and waits until each runs with an address and a network namespace. The framework
// starts servers and clients inside those namespaces; the pods only hold them.
func (k *kubeClients) runPods(ctx context.Context, nodes map[string]string) (map[string]labPod, error) {
	for name, node := range nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "myelin-bench"}},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "hold", Image: "host", Command: []string{"sleep", "infinity"}}},
			},
		}
		if _, err := k.cs.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s on %s: %w", name, node, err)
		}
	}
	out := map[string]labPod{}
	for name, node := range nodes {
		p, err := k.waitPod(ctx, name, node)
		if err != nil {
			return nil, err
		}
		out[name] = p
	}
	return out, nil
}

// waitPod waits until a pod runs with an address and its namespace exists.
func (k *kubeClients) waitPod(ctx context.Context, name, node string) (labPod, error) {
	ctx, cancel := context.WithTimeout(ctx, labPodTimeout)
	defer cancel()
	state := "not created"
	for {
		p, err := k.cs.CoreV1().Pods(benchNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			state = fmt.Sprintf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
			ip, perr := netip.ParseAddr(p.Status.PodIP)
			ns := labplan.NetNSPath(labplan.PodNetNS(string(p.UID)))
			if _, serr := os.Stat(ns); p.Status.Phase == corev1.PodRunning && perr == nil && serr == nil {
				return labPod{NetNS: ns, IP: ip}, nil
			}
		}
		select {
		case <-ctx.Done():
			return labPod{}, fmt.Errorf("pod %s on %s not running with an IP after %s (%s); see %s",
				name, node, labPodTimeout, state, k.Paths.Log("kubelet-"+node))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkModes checks that a lab node's agent routes in the modes a case's name
// promises (p's host routing, source validation and, when set, who encapsulates in
// tunnel mode), so a fallback never passes for the mode measured.
func checkModes(ctx context.Context, node string, p podPair) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := labdriver.AgentStatus(ctx, node)
	if err != nil {
		return err
	}
	if !strings.EqualFold(st.Routing.HostRouting, p.hostRouting) {
		return fmt.Errorf("%s routes with %s host routing, not %s (%s)", node, st.Routing.HostRouting, p.hostRouting, st.Routing.HostRoutingReason)
	}
	if st.SourceCheck.Enabled == p.sourceCheckOff {
		return fmt.Errorf("%s has source validation %v, want %v (%s)", node, st.SourceCheck.Enabled, !p.sourceCheckOff, st.SourceCheck.Warning)
	}
	if p.tunnel != "" && st.Routing.Tunnel != p.tunnel {
		return fmt.Errorf("%s's VXLAN is encapsulated by %q, not %s (%s)", node, st.Routing.Tunnel, p.tunnel, st.Routing.TunnelReason)
	}
	return nil
}
