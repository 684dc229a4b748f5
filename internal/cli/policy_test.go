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
