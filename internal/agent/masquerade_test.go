package agent

import (
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
