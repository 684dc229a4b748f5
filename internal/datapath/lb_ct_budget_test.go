package datapath

import (
	"fmt"
	"testing"
)

// One pod opening Service flows faster than they idle out can't take every other
// pod's Services (lb-ct-pod-max): GCServiceCT lists a pod holding more flows in
// myelin_lb_ct than its budget, and the datapath drops that pod's new Service flows
// as DROP_SVC_CT_BUDGET, while its open flows and another pod's new one are
// translated.
func TestPrivilegedLBConntrackBudget(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, LoadBalancing: true, NodeIP: testNodeIP,
		ClusterCIDR: lbClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort, LBCTPodMax: 2})
	syn := func(sport uint16) pkt { return ipv4(protoTCP, podA, vip).withSrc(podA, sport).withDst(vip, 80) }
	forwarded := func(name string, p pkt) lbCase {
		return lbCase{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: name, endpoints: seedB,
			in: p.build(), verdict: tcActRedirect, out: delivered(p.withDst(podBIP, 8080)), reason: "FORWARDED"}}
	}
	counted := func(want map[string]uint32) func(*Datapath) error {
		return func(d *Datapath) error {
			n, err := d.GCServiceCT(MonotonicNow())
			if err == nil && n != 0 {
				err = fmt.Errorf("GCServiceCT removed %d entries, want none", n)
			}
			if err != nil {
				return err
			}
			return listed(d.objs.MyelinLbCtOver, want)
		}
	}
	first := forwarded("A's first Service flow", syn(40001))
	first.seed = oneService(feTCP, Service{ID: 1, Backends: []uint32{1}})
	third := forwarded("A's third: not yet counted", syn(40003))
	third.then = counted(map[string]uint32{podA: 3})
	fromB := fromPodB(ipv4(protoTCP, podBIP, vip).withDst(vip, 80))
	runLBCases(t, d, []lbCase{
		first,
		forwarded("A's second", syn(40002)),
		third,
		{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: "counted: A holds 3 > 2, its new flow is dropped",
			endpoints: seedB, in: syn(40004).build(), verdict: tcActShot, reason: "DROP_SVC_CT_BUDGET"}},
		forwarded("A's open flow goes on", syn(40001).withTCPFlags(tcpACK)),
		{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: "another pod's new Service flow is translated",
			endpoints: seedB, in: fromB.build(), verdict: tcActRedirect,
			out: delivered(fromB.withSrc(hairpin, 40000).withDst(podBIP, 8080)), reason: "FORWARDED"}},
	})
}
