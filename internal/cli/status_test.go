package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// Status says whether the uplink drops this node's pod addresses, or why not.
func TestStatusUplinkPodCheck(t *testing.T) {
	for _, c := range []struct {
		check api.SourceCheckInfo
		want  string
	}{
		{api.SourceCheckInfo{Enabled: true, UplinkPodCIDR: "10.244.1.0/24"}, "this node's PodCIDR 10.244.1.0/24 is dropped as spoofed"},
		{api.SourceCheckInfo{Enabled: true, UplinkOff: "non-masquerade-cidrs is set"}, "this node's pod addresses are not checked: non-masquerade-cidrs is set"},
	} {
		var b bytes.Buffer
		statusRows{&b}.protection(api.Status{SourceCheck: c.check})
		if !strings.Contains(b.String(), "from the uplink:") || !strings.Contains(b.String(), c.want) {
			t.Errorf("myelin status printed\n%s\nwant a row %q", b.String(), c.want)
		}
	}
}
