package datapath

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestPrivilegedSocketLBFlowService: a pod's connections socket-LB translated at
// connect() or sendmsg() reach myelin_from_pod addressed to the backend, and their
// flow records still name the Service (the frontend their socket was translated
// from), for TCP and unconnected UDP; a direct connection to the same backend
// names none. The pod is a netns behind a veth with the datapath attached; the
// backends listen on the node netns's loopback, at pod addresses: their replies
// are the node's own packets from pod addresses, which source validation's host
// check would drop (host_source.h), so it is off here.
func TestPrivilegedSocketLBFlowService(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, LoadBalancing: true, SocketLB: true,
		NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort,
		NoSourceVerification: true})
	cg := attachSockLB(t, d, Service{ID: 1, Backends: []uint32{1, 2}})
	r := openFlows(t, d)
	svc := netip.MustParseAddrPort(sockSvcAddr)
	inNetns(t, func(node string) {
		pod := &tunnelNode{podNSName: node + "-pod", podIP: mustAddr("10.1.0.10"), hostVeth: "dpvetha"}
		home, err := netns.Get()
		if err != nil {
			t.Error(err)
			return
		}
		defer home.Close()
		if pod.podNS, err = newNamedNetns(pod.podNSName, home); err != nil {
			t.Error(err)
			return
		}
		defer deleteNamedNetns(t, pod.podNSName, pod.podNS)
		if err := attachFlowTestPod(d, pod); err != nil {
			t.Error(err)
			return
		}
		sockServe(t, home)
		for _, c := range []struct {
			what, mode, cgroup, addr string
			want                     netip.AddrPort
		}{
			{"TCP through socket-LB", "tcp", cg, sockSvcAddr, svc},
			{"unconnected UDP through socket-LB", "udp", cg, sockSvcAddr, svc},
			{"TCP to a backend directly", "tcp", "", "10.1.0.20:8080", netip.AddrPort{}},
		} {
			if out, err := runSockClient(t, pod.podNSName, c.cgroup, c.mode, c.addr); err != nil {
				t.Errorf("%s: %v: %s", c.what, err, out)
				continue
			}
			proto := map[string]uint8{"tcp": protoTCP, "udp": protoUDP}[c.mode]
			fr, err := findFlow(r, func(fr FlowRecord) bool {
				first := fr.Kind == FlowNew || (fr.Kind == FlowTCP && fr.TCPFlags == 0x02)
				return first && fr.Direction == "from-pod" && fr.Proto == proto && fr.Src == pod.podIP && fr.DstPort == 8080
			})
			if err != nil {
				t.Errorf("%s: no record of its first packet leaving the pod: %v", c.what, err)
				continue
			}
			if fr.Service != c.want {
				t.Errorf("%s: record %+v names Service %v, want %v", c.what, fr, fr.Service, c.want)
			}
		}
	})
}

// sockLBState is the Service sockLBSetup serves, as TCP and UDP frontends.
func sockLBState(svc Service) lbState {
	return lbState{backends: sockBackends, services: map[Frontend]Service{
		{Addr: mustAddr("10.96.0.10"), Port: 80, Proto: protoTCP}: svc,
		{Addr: mustAddr("10.96.0.10"), Port: 80, Proto: protoUDP}: {ID: svc.ID + 1, Flags: svc.Flags, AffinityTimeout: svc.AffinityTimeout, Backends: svc.Backends},
	}}
}

// attachFlowTestPod wires pod to the node netns the calling thread is in (a route
// to it, its endpoint) and attaches the datapath to its host veth.
func attachFlowTestPod(d *Datapath, pod *tunnelNode) error {
	if err := addTestPod(pod); err != nil {
		return err
	}
	route := &netlink.Route{LinkIndex: pod.hostIdx, Dst: &net.IPNet{IP: pod.podIP.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.RouteAdd(route); err != nil {
		return err
	}
	if err := d.UpsertEndpoint(pod.podIP, EndpointInfo{IfIndex: pod.hostIdx, PodMAC: pod.pMAC, HostMAC: pod.hostMAC, ID: 1}); err != nil {
		return err
	}
	return d.AttachEndpoint(pod.hostIdx, pod.hostVeth)
}

// findFlow reads records until match accepts one, or fails after 5 s without.
func findFlow(r *FlowReader, match func(FlowRecord) bool) (FlowRecord, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		fr, err := nextFlow(r, time.Until(deadline))
		if err != nil || match(fr) {
			return fr, err
		}
	}
}
