package agent

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

type fakeEndpointDatapath struct {
	entry          *datapath.EndpointInfo
	fromPod, toPod bool
	err            error
}

func (f fakeEndpointDatapath) Endpoint(netip.Addr) (datapath.EndpointInfo, bool, error) {
	if f.entry == nil {
		return datapath.EndpointInfo{}, false, nil
	}
	return *f.entry, true, nil
}

func (f fakeEndpointDatapath) EndpointProgramsAttached(int) (bool, bool, error) {
	return f.fromPod, f.toPod, f.err
}

func TestEndpointProblems(t *testing.T) {
	podMAC, hostMAC := net.HardwareAddr{2, 0, 0, 0, 0, 2}, net.HardwareAddr{2, 0, 0, 0, 0, 1}
	ep := api.Endpoint{IP: "10.244.1.5", HostIfName: "myl0123456789a", HostIfIndex: 7, PodMAC: podMAC.String(), HostMAC: hostMAC.String()}
	good := &datapath.EndpointInfo{IfIndex: 7, PodMAC: podMAC, HostMAC: hostMAC}
	other := &datapath.EndpointInfo{IfIndex: 9, PodMAC: podMAC, HostMAC: hostMAC}
	swapped := &datapath.EndpointInfo{IfIndex: 7, PodMAC: hostMAC, HostMAC: podMAC}
	for _, c := range []struct {
		name string
		dp   fakeEndpointDatapath
		want []string // one substring per problem, in order
	}{
		{"healthy", fakeEndpointDatapath{good, true, true, nil}, nil},
		{"entry missing", fakeEndpointDatapath{nil, true, true, nil}, []string{"no entry for 10.244.1.5"}},
		{"entry on another veth", fakeEndpointDatapath{other, true, true, nil}, []string{"leads to ifindex 9"}},
		{"wrong MACs", fakeEndpointDatapath{swapped, true, true, nil}, []string{"has MACs"}},
		{"from_pod detached", fakeEndpointDatapath{good, false, true, nil}, []string{"myelin_from_pod is not attached to myl0123456789a ingress"}},
		{"both detached, no entry", fakeEndpointDatapath{nil, false, false, nil},
			[]string{"no entry", "myelin_from_pod is not attached", "myelin_to_pod is not attached"}},
		{"query fails", fakeEndpointDatapath{good, false, false, errors.New("EPERM")}, []string{"querying the programs on myl0123456789a"}},
	} {
		got := endpointProblems(c.dp, ep)
		if len(got) != len(c.want) {
			t.Errorf("%s: problems %q, want %d", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %d is %q, want it to contain %q", c.name, i, got[i], w)
			}
		}
	}
}
