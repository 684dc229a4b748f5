package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
)

// Attacks from a node's own network namespace, as a hostNetwork pod would
// make them: packets with a pod's address as their source. Each attack is
// followed by a control, the same packet from an address allowed to send it,
// which must arrive (the tool works, only the forgery is refused).

// forgedPort is the UDP port of the host forgeries' datagrams.
const forgedPort = 9997

// forgeRawFromHost sends, from node's namespace through a raw socket (what
// CAP_NET_RAW allows), UDP from the pod impersonated to each target, then
// from node's own address: the targets see only the latter, and node counts
// a DROP_SPOOFED_SOURCE per forged packet where it would have left (to-pod
// for a target of its own, to-netdev for one of another node).
func forgeRawFromHost(t *testing.T, cs kubernetes.Interface, node string, impersonated corev1.Pod, targets ...corev1.Pod) {
	t.Helper()
	own := nodeIP(t, cs, node)
	forged := netip.MustParseAddr(impersonated.Status.PodIP)
	caps := captureIn(t, targets)
	before := hostSpoofDrops(t, node)
	err := netns.Do(labplan.NetNSPath(node), func() error {
		for _, src := range []netip.Addr{forged, own} {
			for _, p := range targets {
				if err := sendRawUDP(src, netip.MustParseAddr(p.Status.PodIP)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send from %s's namespace: %v", node, err)
	}
	expectOnly(t, caps, targets, own, forged)
	want := map[string]uint64{"to-pod": 0, "to-netdev": 0}
	for _, p := range targets {
		if p.Spec.NodeName == node {
			want["to-pod"]++
		} else {
			want["to-netdev"]++
		}
	}
	after := hostSpoofDrops(t, node)
	for dir, n := range want {
		if got := after[dir] - before[dir]; got < n {
			t.Errorf("%s %s/DROP_SPOOFED_SOURCE grew by %d, want >= %d", node, dir, got, n)
		}
	}
}

// forgeVXLANFromHost sends, from node's namespace through a plain UDP
// socket (no capability at all), a VXLAN frame to the tunnel port of
// target's node whose inner packet comes from the pod impersonated (of
// node): target's node would accept it (the outer source is the node owning
// the inner one), so node's to-netdev must drop it, and does for any UDP to
// that port its stack builds (DROP_SPOOFED_SOURCE). The control is the same
// frame from the lab's outside host with its own address inside, which the
// peer rule lets through: target sees only that one.
func forgeVXLANFromHost(t *testing.T, cs kubernetes.Interface, node string, impersonated, target corev1.Pod) {
	t.Helper()
	peer := nodeIP(t, cs, target.Spec.NodeName)
	forged := netip.MustParseAddr(impersonated.Status.PodIP)
	outside := labplan.DefaultAddressing().ExternalServerIP()
	dst := netip.MustParseAddr(target.Status.PodIP)
	caps := captureIn(t, []corev1.Pod{target})
	before := hostSpoofDrops(t, node)
	for _, send := range []struct {
		ns  string
		src netip.Addr
	}{{node, forged}, {labplan.ExtNS, outside}} {
		frame := append(append(append([]byte{}, datapath.OverlayMAC(peer)...), 0x02, 0, 0, 0, 0, 1), 0x08, 0x00)
		frame = append(frame, ipv4UDP(send.src, dst, forgedPort, []byte("forged VXLAN"))...)
		if err := netns.Do(labplan.NetNSPath(send.ns), func() error { return sendVXLAN(peer, frame) }); err != nil {
			t.Fatalf("send from %s's namespace: %v", send.ns, err)
		}
	}
	expectOnly(t, caps, []corev1.Pod{target}, outside, forged)
	if got := hostSpoofDrops(t, node)["to-netdev"] - before["to-netdev"]; got < 1 {
		t.Errorf("%s to-netdev/DROP_SPOOFED_SOURCE grew by %d, want >= 1 (the VXLAN frame)", node, got)
	}
}

// captureIn opens a capture in each pod's namespace, closed when the test ends.
func captureIn(t *testing.T, pods []corev1.Pod) []*capture {
	t.Helper()
	var caps []*capture
	for _, p := range pods {
		c, err := openPodCapture(podNetNS(p))
		if err != nil {
			t.Fatalf("capture in %s: %v", p.Name, err)
		}
		t.Cleanup(c.close)
		caps = append(caps, c)
	}
	return caps
}

// expectOnly checks that every capture saw a datagram to forgedPort from
// own (the control) and none from forged.
func expectOnly(t *testing.T, caps []*capture, pods []corev1.Pod, own, forged netip.Addr) {
	t.Helper()
	for i, c := range caps {
		from, got := forgedPortSources(t, c, own)
		if slices.Contains(from, forged) {
			t.Errorf("%s (%s) received the forged packet from %s", pods[i].Name, pods[i].Spec.NodeName, forged)
		}
		if !slices.Contains(from, own) {
			t.Errorf("%s saw no packet from the control's address %s (frames seen: %v): the capture proves nothing", pods[i].Name, own, got)
		}
	}
}

// forgedPortSources waits until c saw a frame from own and returns the sources of
// the datagrams to forgedPort it saw, and every frame.
func forgedPortSources(t *testing.T, c *capture, own netip.Addr) ([]netip.Addr, []captured) {
	t.Helper()
	got, err := c.sourcesUntil(own, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var from []netip.Addr
	for _, f := range got {
		if f.udpPort == forgedPort {
			from = append(from, f.src)
		}
	}
	return from, got
}

// hostSpoofDrops is node's DROP_SPOOFED_SOURCE packets by the directions
// where its own packets are checked.
func hostSpoofDrops(t *testing.T, node string) map[string]uint64 {
	t.Helper()
	return map[string]uint64{
		"to-pod":    counter(t, node, "to-pod", "DROP_SPOOFED_SOURCE"),
		"to-netdev": counter(t, node, "to-netdev", "DROP_SPOOFED_SOURCE"),
	}
}

// podsByNode maps each pod's node to it (one pod a node).
func podsByNode(pods []corev1.Pod) map[string]corev1.Pod {
	on := map[string]corev1.Pod{}
	for _, p := range pods {
		on[p.Spec.NodeName] = p
	}
	return on
}

// nodeIP is a lab node's InternalIP.
func nodeIP(t *testing.T, cs kubernetes.Interface, node string) netip.Addr {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := k8s.NodeInternalIP(n)
	if !ip.IsValid() {
		t.Fatalf("node %s has no InternalIP", node)
	}
	return ip
}

// sendRawUDP sends a UDP datagram from src to dst:forgedPort through a raw
// socket (IP_HDRINCL), which writes any source.
func sendRawUDP(src, dst netip.Addr) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("open raw socket: %w", err)
	}
	defer unix.Close(fd)
	pkt := ipv4UDP(src, dst, forgedPort, []byte("forged from the host"))
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
		return fmt.Errorf("send raw UDP %s -> %s: %w", src, dst, err)
	}
	return nil
}

// sendVXLAN sends inner (an Ethernet frame) in a VXLAN header (VNI 0) to
// peer's tunnel port through an ordinary UDP socket.
func sendVXLAN(peer netip.Addr, inner []byte) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	msg := append([]byte{0x08, 0, 0, 0, 0, 0, 0, 0}, inner...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrInet4{Addr: peer.As4(), Port: 8472}); err != nil {
		return fmt.Errorf("send VXLAN to %s: %w", peer, err)
	}
	return nil
}
