package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/config"
)

func TestNoMasquerade(t *testing.T) {
	c, err := config.Resolve(config.Source{Name: "cm", Values: map[string]string{
		"cluster-cidr": "10.244.0.0/16", "ipv4-native-routing-cidr": "10.0.0.0/8",
		"non-masquerade-cidrs": "192.168.0.0/16, 172.16.0.0/12, 10.0.0.0/8",
	}})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.11"}}}}
	keep := noMasquerade(noMasqueradeBase(c), []*corev1.Node{node})
	var got []string
	for _, p := range keep {
		got = append(got, p.String())
	}
	want := "10.0.0.0/8 10.244.0.0/16 172.16.0.0/12 192.168.0.0/16 198.18.0.11/32"
	if strings.Join(got, " ") != want {
		t.Errorf("noMasquerade = %v, want %s", got, want)
	}
}

// fakeMasq records what the masquerade loop writes: the no-masquerade set (a
// fake datapath map) and the nat chain (a fake iptables).
type fakeMasq struct {
	set    [][]netip.Prefix
	synced [][]netip.Prefix
	remove int
}

func (f *fakeMasq) SetNoMasquerade(p []netip.Prefix) error {
	f.set = append(f.set, p)
	return nil
}
func (f *fakeMasq) Sync(_ netip.Prefix, keep []netip.Prefix) error {
	f.synced = append(f.synced, keep)
	return nil
}
func (f *fakeMasq) Remove() error {
	f.remove++
	return nil
}

// TestMasqueradeLoopWritesSetInEveryMode: the no-masquerade set is also the list of
// cluster addresses a pod may not tunnel to (bpf/lib/source.h), so every mode writes
// it, masquerading or not; only the iptables mode keeps a nat chain.
func TestMasqueradeLoopWritesSetInEveryMode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.11"}}}}
	base := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	want := "[10.244.0.0/16 198.18.0.11/32]"
	for _, tc := range []struct {
		name           string
		mode           masqueradeMode
		synced, remove int
	}{
		{"off", masqueradeOff, 0, 1},
		{"bpf", masqueradeBPF, 0, 1},
		{"iptables", masqueradeIPTables, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeMasq{}
			m := &masqueradeLoop{mode: tc.mode, cluster: base[0], base: base, set: f, nat: f}
			if err := m.sync([]*corev1.Node{node}); err != nil {
				t.Fatal(err)
			}
			if len(f.set) != 1 || fmt.Sprint(f.set[0]) != want {
				t.Errorf("no-masquerade set written %v, want once %s", f.set, want)
			}
			if len(f.synced) != tc.synced || f.remove != tc.remove {
				t.Errorf("nat chain synced %d and removed %d times, want %d and %d", len(f.synced), f.remove, tc.synced, tc.remove)
			}
			// The periodic resync with the same Nodes writes nothing.
			if err := m.sync([]*corev1.Node{node}); err != nil {
				t.Fatal(err)
			}
			if len(f.set) > 1 {
				t.Errorf("an unchanged resync wrote the set again: %v", f.set)
			}
		})
	}
}
