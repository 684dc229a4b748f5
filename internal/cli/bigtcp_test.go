package cli

import (
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// The BIG TCP row says off and why, or the size and the devices.
func TestBIGTCPRow(t *testing.T) {
	for _, c := range []struct {
		in   api.BIGTCPInfo
		want string
	}{
		{api.BIGTCPInfo{}, "off (enable-ipv4-big-tcp is false)"},
		{api.BIGTCPInfo{Enabled: true, Reason: "device myelin_vxlan segments at most 65536 bytes"}, "off: device myelin_vxlan segments"},
		{api.BIGTCPInfo{Enabled: true, Size: 196608, Devices: []string{"eth0"}}, "IPv4 192 KiB on eth0 and new pods' veths"},
	} {
		if got := bigTCPRow(c.in); !strings.HasPrefix(got, c.want) {
			t.Errorf("bigTCPRow(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
}
