package datapath

import (
	"fmt"
	"slices"
	"testing"
)

// externalTrafficPolicy: Local on a NodePort: clients from outside the node
// get only the node's own backends (the first LocalBackends slots), by the
// Maglev table when there is one, and none at all without a local one; the
// node's pods get any backend, as kube-proxy short-circuits them.
func TestPrivilegedLBNodePortExternalLocal(t *testing.T) {
	requirePrivileged(t)
	for _, maglev := range []uint32{0, 7} {
		for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
			t.Run(fmt.Sprintf("%v/maglev-%d", routing, maglev), func(t *testing.T) {
				d := loadLB(t, routing, maglev)
				runLBCases(t, d, nodePortLocalCases(d, routing, maglev))
			})
		}
	}
}

func nodePortLocalCases(d *Datapath, routing HostRouting, maglev uint32) []lbCase {
	const flags = ServiceNodePort | ServiceExternalLocal
	// Backend 1 (pod B) is this node's, backend 2 another node's.
	both := Service{ID: 1, Flags: flags, Backends: []uint32{1, 2}, LocalBackends: 1}
	remoteOnly := Service{ID: 2, Flags: flags, Backends: []uint32{2}}
	if maglev != 0 {
		both.Maglev = slices.Repeat([]uint32{1}, int(maglev))
	}
	var cases []lbCase
	// Outside clients on eight source ports: all of them to the local backend.
	for port := uint16(40000); port < 40008; port++ {
		req := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, port).withDst(nodeIP, nodePort)
		toLocal := req.withDst(podBIP, 8080)
		out, verdict, reason := delivered(toLocal), uint32(tcActRedirect), "FORWARDED"
		if routing == HostRoutingLegacy {
			out, verdict, reason = toLocal.build(), tcActOK, "PASS_STACK"
		}
		c := lbCase{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", progCase: progCase{
			name: fmt.Sprintf("outside client port %d: the local backend", port), endpoints: seedB,
			in: req.build(), verdict: verdict, out: out, reason: reason}}
		if port == 40000 {
			c.seed = oneService(feNodePort, both)
		}
		cases = append(cases, c)
	}
	outside := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	pod := ipv4(protoTCP, podA, nodeIP).withDst(nodeIP, nodePort)
	return append(cases,
		lbCase{seed: oneService(feNodePort, remoteOnly), prog: d.objs.MyelinFromNetdev, dir: "from-netdev", progCase: progCase{
			name: "no local backend: an outside client is refused", endpoints: seedB,
			in: outside.build(), verdict: tcActRedirect, out: portUnreachable(outside.build()), reason: "DROP_SVC_NO_BACKEND"}},
		lbCase{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{
			name: "no local backend: the node's pod gets the other node's", endpoints: seedB,
			in: pod.build(), verdict: tcActOK, out: pod.withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}},
	)
}
