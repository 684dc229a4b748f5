package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// A pod's problems (a direction that fails closed, its connection budget spent)
// are printed under the table, naming the pod.
func TestWritePolicyStatusShowsEndpointProblems(t *testing.T) {
	st := api.PolicyStatus{Node: "n1", Synced: true, Endpoints: []api.PolicyEndpoint{
		{Pod: "x/a", IP: "10.244.0.10", Ingress: "on", Egress: "off"},
		{Pod: "x/flood", IP: "10.244.0.11", Ingress: "off", Egress: "on",
			Problems: []string{"held 40000 tracked connections, over policy-ct-pod-max 32768"}},
	}}
	var b bytes.Buffer
	writePolicyStatus(&b, st)
	want := "WARNING: x/flood: held 40000 tracked connections, over policy-ct-pod-max 32768\n"
	if !strings.Contains(b.String(), want) || strings.Count(b.String(), "WARNING") != 1 {
		t.Errorf("myelin endpoints printed\n%s\nwant one warning %q", b.String(), want)
	}
}

// The node's addresses are listed, the first 16 of a long list with a count of
// the rest; before the first computation too.
func TestWritePolicyStatusHostAddresses(t *testing.T) {
	for _, c := range []struct {
		name  string
		st    api.PolicyStatus
		want  string
		count int
	}{
		{"synced", api.PolicyStatus{Node: "n1", Synced: true, HostAddresses: []string{"192.168.0.11", "198.51.100.77"}},
			"allowed from: 192.168.0.11, 198.51.100.77\n", 2},
		{"not synced", api.PolicyStatus{Node: "n1", HostAddresses: []string{"192.168.0.11"}}, "allowed from: 192.168.0.11\n", 1},
		{"many", api.PolicyStatus{Node: "n1", Synced: true, HostAddresses: strings.Split(strings.Repeat("10.96.0.1,", 39)+"10.96.0.1", ",")},
			" and 24 more (-o json lists them)\n", 16},
	} {
		var b bytes.Buffer
		writePolicyStatus(&b, c.st)
		if !strings.Contains(b.String(), c.want) || strings.Count(b.String(), "10.96.0.1")+strings.Count(b.String(), "192.168.0.11")+strings.Count(b.String(), "198.51.100.77") != c.count {
			t.Errorf("%s: printed\n%s\nwant %q and %d addresses", c.name, b.String(), c.want, c.count)
		}
	}
}
