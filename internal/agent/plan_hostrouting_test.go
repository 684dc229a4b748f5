package agent

import (
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
)

func TestDecideHostRouting(t *testing.T) {
	all := datapath.Features{TCX: true, RedirectPeer: true, RedirectNeigh: true, FibLookup: true, RingBuf: true}
	noPeer := all
	noPeer.RedirectPeer = false
	tests := []struct {
		name     string
		values   map[string]string
		features datapath.Features
		wantBPF  bool
		want     string // in the reason, or in the error when wantErr
		wantErr  bool
		rules    []string
	}{
		{"auto, all there", nil, all, true, "every requirement", false, nil},
		{"auto, kernel lacks redirect_peer", nil, noPeer, false, "fell back to legacy: the kernel lacks", false, nil},
		{"auto, iptables masquerade", map[string]string{"enable-bpf-masquerade": "false"}, all, false, "BPF host routing requires BPF masquerade", false, nil},
		{"auto, masquerade off", map[string]string{"enable-bpf-masquerade": "false", "enable-ipv4-masquerade": "false"}, all, true, "every requirement", false, nil},
		{"legacy", map[string]string{"host-routing": "legacy"}, all, false, "host-routing is legacy (src)", false, nil},
		{"bpf, all there", map[string]string{"host-routing": "bpf"}, all, true, "host-routing is bpf", false, nil},
		{"bpf refused", map[string]string{"host-routing": "bpf", "enable-bpf-masquerade": "false"}, all, false, "requires BPF masquerade", true, nil},
		{"bpf refused by kernel", map[string]string{"host-routing": "bpf"}, noPeer, false, "the kernel lacks", true, nil},
		{"auto, user rules, refuse", nil, all, false, "user-defined firewall rules were found in filter/INPUT", false, []string{"filter/INPUT"}},
		{"auto, user rules, warn", map[string]string{"user-iptables-guard": "warn"}, all, true, "every requirement", false, []string{"filter/INPUT"}},
		{"auto, kube-proxy serves Services", map[string]string{"kube-proxy-replacement": "false"}, all, false, "fell back to legacy: kube-proxy-replacement is false", false, nil},
		{"bpf refused with kube-proxy", map[string]string{"host-routing": "bpf", "kube-proxy-replacement": "false"}, all, false, "BPF host routing would bypass", true, nil},
		{"bpf, user rules, refuse", map[string]string{"host-routing": "bpf"}, all, false, "inet mine/c", true, []string{"inet mine/c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Resolve(config.Source{Name: "src", Values: tt.values})
			if err != nil {
				t.Fatal(err)
			}
			d, err := decideHostRouting(c, tt.features, tt.rules)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.BPF != tt.wantBPF || !strings.Contains(d.Reason, tt.want) {
				t.Errorf("decision = %+v, want BPF=%v and a reason containing %q", d, tt.wantBPF, tt.want)
			}
		})
	}
}
