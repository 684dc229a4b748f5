package conformance

import (
	"maps"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/myelin-net/myelin/internal/datapath"
	mpolicy "github.com/myelin-net/myelin/internal/policy"
)

// cluster is the model as internal/policy sees it: x/* on node n1,
// y/* and z/* spread over n1 and n2.
type cluster struct {
	pods     map[PodRef]mpolicy.Pod
	nsLabels map[string]map[string]string
	policies map[string]*networkingv1.NetworkPolicy // ns/name
}

func newCluster() *cluster {
	c := &cluster{pods: map[PodRef]mpolicy.Pod{}, nsLabels: map[string]map[string]string{}, policies: map[string]*networkingv1.NetworkPolicy{}}
	for i, r := range AllPods() {
		node := "n1"
		if i%2 == 1 {
			node = "n2"
		}
		p := mpolicy.Pod{Namespace: r.NS, Name: r.Pod, Labels: map[string]string{"pod": r.Pod},
			IP: netip.AddrFrom4([4]byte{10, 244, byte(i % 2), byte(10 + i)}), Node: node}
		for _, port := range Ports {
			p.Ports = append(p.Ports, mpolicy.NamedPort{Name: PortName(port, corev1.ProtocolTCP), Proto: mpolicy.ProtoTCP, Port: uint16(port)},
				mpolicy.NamedPort{Name: PortName(port, corev1.ProtocolUDP), Proto: mpolicy.ProtoUDP, Port: uint16(port)})
		}
		c.pods[r] = p
	}
	for _, ns := range Namespaces {
		c.nsLabels[ns] = map[string]string{nsLabel: ns}
	}
	return c
}

func (c *cluster) ips() IPs {
	out := IPs{}
	for r, p := range c.pods {
		out[r] = p.IP
	}
	return out
}

func (c *cluster) do(a Action) {
	switch {
	case a.Create != nil:
		np := a.Create(c.ips())
		c.policies[np.Namespace+"/"+np.Name] = np
	case a.Update != nil:
		np := a.Update(c.ips())
		c.policies[np.Namespace+"/"+np.Name] = np
	case a.DeleteAll:
		c.policies = map[string]*networkingv1.NetworkPolicy{}
	case a.LabelNamespace != "":
		for k, v := range a.Labels {
			c.nsLabels[a.LabelNamespace][k] = v
		}
	case a.LabelPod != nil:
		p := c.pods[*a.LabelPod]
		labels := maps.Clone(p.Labels)
		maps.Copy(labels, a.Labels)
		p.Labels = labels
		c.pods[*a.LabelPod] = p
	}
}

func (c *cluster) input(node string) mpolicy.Input {
	in := mpolicy.Input{Node: node, Namespaces: c.nsLabels}
	for _, p := range c.pods {
		in.Pods = append(in.Pods, p)
	}
	for _, np := range c.policies {
		in.Policies = append(in.Policies, np)
	}
	return in
}

// lookup is the datapath's identity of ip: the longest ipcache prefix.
func lookup(cache map[netip.Prefix]uint32, ip netip.Addr) uint32 {
	best, id := -1, datapath.IdentityWorld
	for p, i := range cache {
		if p.Contains(ip) && p.Bits() > best {
			best, id = p.Bits(), i
		}
	}
	return id
}

// allows is the datapath's decision at one pod's check, from Compute's state.
func allows(st mpolicy.State, local, peer netip.Addr, egress bool, proto uint8, port uint16) bool {
	ep := st.Endpoints[local]
	on := datapath.PolicyIngress
	if egress {
		on = datapath.PolicyEgress
	}
	if ep == nil || ep.Flags&on == 0 {
		return true
	}
	for _, id := range []uint32{lookup(st.IPCache, peer), datapath.IdentityAny} {
		for _, r := range ep.Entries[mpolicy.Key{Identity: id, Egress: egress}] {
			if r.Proto == 0 || (r.Proto == proto && port >= r.Lo && port <= r.Hi) {
				return true
			}
		}
	}
	return false
}

func protoNumber(p corev1.Protocol) uint8 {
	switch p {
	case corev1.ProtocolUDP:
		return mpolicy.ProtoUDP
	case corev1.ProtocolSCTP:
		return mpolicy.ProtoSCTP
	}
	return mpolicy.ProtoTCP
}

// Every upstream truth table holds for what mpolicy.Compute writes (both
// ends' checks, each on its own node) and for mpolicy.Trace.
func TestCasesAgainstCompute(t *testing.T) {
	if n := len(Cases()); n != 48 {
		t.Errorf("%d cases, want upstream's 48", n)
	}
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			c := newCluster()
			ids := map[string]*mpolicy.Identities{"n1": mpolicy.NewIdentities(), "n2": mpolicy.NewIdentities()}
			for si, s := range tc.Steps {
				for _, a := range s.Do {
					c.do(a)
				}
				states := map[string]mpolicy.State{}
				for node, id := range ids {
					states[node] = mpolicy.Compute(c.input(node), id)
				}
				for _, pr := range s.Probes {
					for _, f := range AllPods() {
						for _, d := range AllPods() {
							if f == d {
								continue
							}
							src, dst := c.pods[f], c.pods[d]
							proto, port := protoNumber(pr.Proto), uint16(pr.Port)
							got := allows(states[src.Node], src.IP, dst.IP, true, proto, port) &&
								allows(states[dst.Node], dst.IP, src.IP, false, proto, port)
							want := pr.Expected(f, d)
							if got != want {
								t.Errorf("step %d %d/%s %s -> %s: datapath state allows=%v, want %v", si, pr.Port, pr.Proto, f, d, got, want)
							}
							if tr := mpolicy.Trace(c.input(""), src, dst, proto, port); tr.Allowed() != want {
								t.Errorf("step %d %d/%s %s -> %s: trace %+v, want allowed=%v", si, pr.Port, pr.Proto, f, d, tr, want)
							}
						}
					}
				}
			}
		})
	}

}
