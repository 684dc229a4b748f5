package labplan

import (
	"strings"
	"testing"
)

func TestFlannelOptions(t *testing.T) {
	flannel := DefaultOptions()
	flannel.CNI = CNIFlannel
	tests := []struct {
		name    string
		o       Options
		wantErr string // "" = valid
	}{
		{"default backend", flannel, ""},
		{"vxlan", with(flannel, func(o *Options) { o.FlannelBackend = FlannelVXLAN }), ""},
		{"host-gw", with(flannel, func(o *Options) { o.FlannelBackend = FlannelHostGW }), ""},
		{"vxlan over l3", with(flannel, func(o *Options) { o.FlannelBackend, o.Underlay = FlannelVXLAN, UnderlayL3 }), ""},
		{"unknown backend", with(flannel, func(o *Options) { o.FlannelBackend = "udp" }),
			`--flannel-backend "udp": unknown backend; use one of: vxlan, host-gw`},
		{"host-gw over l3", with(flannel, func(o *Options) { o.FlannelBackend, o.Underlay = FlannelHostGW, UnderlayL3 }),
			"--flannel-backend host-gw needs every node on one L2 segment"},
		{"backend without flannel", with(DefaultOptions(), func(o *Options) { o.FlannelBackend = FlannelVXLAN }),
			"--flannel-backend vxlan: only valid with --cni flannel (this lab has --cni myelin)"},
		{"unknown cni lists flannel", with(DefaultOptions(), func(o *Options) { o.CNI = "calico" }),
			`--cni "calico": unknown CNI; use one of: myelin, bridge, flannel`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPlan(tt.o, DefaultAddressing())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("NewPlan() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("NewPlan() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func with(o Options, f func(*Options)) Options {
	f(&o)
	return o
}
