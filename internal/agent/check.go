package agent

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// endpointDatapath is what checking an endpoint reads from the datapath.
type endpointDatapath interface {
	Endpoint(ip netip.Addr) (datapath.EndpointInfo, bool, error)
	EndpointProgramsAttached(ifindex int) (fromPod, toPod bool, err error)
}

// endpointProblems says what is wrong with ep in the datapath: its endpoints map
// entry (present, on its veth, with its MACs) and the programs on its host veth
// (myelin_from_pod on ingress, myelin_to_pod on egress). None: the datapath delivers
// to and from the pod. Costs one map lookup and two program queries, on request only.
func endpointProblems(dp endpointDatapath, ep api.Endpoint) []string {
	ip, err := netip.ParseAddr(ep.IP)
	if err != nil {
		return []string{fmt.Sprintf("the endpoint's IP %q is not an address", ep.IP)}
	}
	var out []string
	info, ok, err := dp.Endpoint(ip)
	switch {
	case err != nil:
		out = append(out, fmt.Sprintf("reading the endpoints map entry of %s failed: %v", ip, err))
	case !ok:
		out = append(out, fmt.Sprintf("the endpoints map has no entry for %s, so traffic to the pod is not delivered", ip))
	case info.IfIndex != ep.HostIfIndex:
		out = append(out, fmt.Sprintf("the endpoints map entry of %s leads to ifindex %d, not to the pod's veth %s (index %d)",
			ip, info.IfIndex, ep.HostIfName, ep.HostIfIndex))
	case info.PodMAC.String() != ep.PodMAC || info.HostMAC.String() != ep.HostMAC:
		out = append(out, fmt.Sprintf("the endpoints map entry of %s has MACs pod %s host %s, the pod's are %s and %s",
			ip, info.PodMAC, info.HostMAC, ep.PodMAC, ep.HostMAC))
	}
	fromPod, toPod, err := dp.EndpointProgramsAttached(ep.HostIfIndex)
	switch {
	case err != nil:
		out = append(out, fmt.Sprintf("querying the programs on %s (index %d) failed: %v", ep.HostIfName, ep.HostIfIndex, err))
	default:
		if !fromPod {
			out = append(out, fmt.Sprintf("myelin_from_pod is not attached to %s ingress, so traffic from the pod bypasses the datapath", ep.HostIfName))
		}
		if !toPod {
			out = append(out, fmt.Sprintf("myelin_to_pod is not attached to %s egress, so Service replies to the pod are not translated", ep.HostIfName))
		}
	}
	return out
}

// handleCheckEndpoint answers GET /v1/endpoints/{id}/check (CNI CHECK).
func (a *server) handleCheckEndpoint(w http.ResponseWriter, r *http.Request) {
	ep, ok := a.eps.Get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint for container %s on node %s", r.PathValue("id"), a.cfg.Node))
		return
	}
	writeJSON(w, http.StatusOK, api.EndpointCheck{Problems: endpointProblems(a.dp, ep)})
}
