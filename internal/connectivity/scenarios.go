package connectivity

import (
	"fmt"
	"net"
	"strconv"
)

// scenario is one check: a probe run in pod from, towards a target, with what is
// expected. A scenario with skip set is reported, never run.
type scenario struct {
	name   string
	from   string   // the pod the probe runs in
	to     string   // the target as a person reads it
	expect string   // what must happen, e.g. "HTTP 200", "denied"
	probe  []string // `myelin connectivity probe` arguments
	deny   bool     // passes when the probe fails (NetworkPolicy deny)
	policy bool     // runs with the test's NetworkPolicy in place
	skip   string
}

func (e *env) at(p string) string {
	q := e.pods[p]
	return fmt.Sprintf("%s (%s, %s)", q.name, q.node, q.ip)
}

func (e *env) httpTo(name, from, target, what, expectBody string) scenario {
	argv := []string{"http", "--to", "http://" + target + "/"}
	expect := "HTTP 200"
	if expectBody != "" {
		argv = append(argv, "--expect", expectBody)
		expect += " from " + expectBody
	}
	return scenario{name: name, from: from, to: what + " " + target, expect: expect, probe: argv}
}

func (e *env) podHTTP(name, from, to string) scenario {
	q := e.pods[to]
	return e.httpTo(name, from, net.JoinHostPort(q.ip, strconv.Itoa(serverPort)), fmt.Sprintf("%s (%s)", q.name, q.node), "")
}

// scenarios lists every check in the order they run, for the deployed env and the
// options (external host, cluster domain).
func (e *env) scenarios(o Options) []scenario {
	oneNode := len(e.nodes) < 2
	cross := e.podHTTP("pod-to-pod/cross-node", podClient, podServerB)
	hostCross := e.podHTTP("host-to-pod/cross-node", podHost, podServerA)
	if oneNode {
		cross.skip, hostCross.skip = "one node: nothing to cross to", "one node: nothing to cross to"
	}
	s := []scenario{
		e.podHTTP("pod-to-pod/same-node", podClient, podServerA),
		cross,
		e.httpTo("pod-to-service/cluster-ip", podClient, net.JoinHostPort(e.services[svcEcho].Spec.ClusterIP, "80"), "Service "+svcEcho, ""),
	}
	s = append(s, e.nodePortScenarios()...)
	b := e.nodes[len(e.nodes)-1]
	s = append(s,
		e.httpTo("pod-to-host", podClient, net.JoinHostPort(b.ip, strconv.Itoa(e.hostPort)), "host of "+b.name, ""),
		e.podHTTP("host-to-pod/same-node", podHost, podServerB),
		hostCross,
		e.externalScenario(o),
		e.dnsScenario(o),
	)
	s = append(s, e.packetScenarios()...)
	return append(s, e.policyScenarios()...)
}

// nodePortScenarios: the NodePort from every node, and the externalTrafficPolicy:
// Local NodePort on each node with a server. Another node's must answer with that
// node's server: the client comes from outside it. The client's own node's may answer
// with any: the node's pods are its own clients, which kube-proxy "short-circuits" to
// every endpoint.
func (e *env) nodePortScenarios() []scenario {
	var s []scenario
	port := strconv.Itoa(int(e.services[svcEcho].Spec.Ports[0].NodePort))
	for _, n := range e.nodes {
		s = append(s, e.httpTo("pod-to-service/node-port/"+n.name, podClient, net.JoinHostPort(n.ip, port), "NodePort of "+n.name, ""))
	}
	local := strconv.Itoa(int(e.services[svcLocal].Spec.Ports[0].NodePort))
	for _, srv := range []string{podServerA, podServerB} {
		q := e.pods[srv]
		ip := e.nodeIP(q.node)
		what, want := "externalTrafficPolicy: Local NodePort of "+q.node, "server="+srv
		if q.node == e.pods[podClient].node {
			what, want = "externalTrafficPolicy: Local NodePort of the client's own node (any server)", ""
		}
		sc := e.httpTo("pod-to-service/local-traffic/"+q.node, podClient, net.JoinHostPort(ip, local), what, want)
		if srv == podServerB && len(e.nodes) < 2 {
			continue
		}
		s = append(s, sc)
	}
	return s
}

func (e *env) nodeIP(name string) string {
	for _, n := range e.nodes {
		if n.name == name {
			return n.ip
		}
	}
	return ""
}

func (e *env) externalScenario(o Options) scenario {
	sc := e.httpTo("pod-to-outside", podClient, o.External, "outside host", "")
	if o.External == "" {
		sc.to, sc.skip = "outside host", "no --external host given (the lab's is used only on the running lab)"
	}
	return sc
}

func (e *env) dnsScenario(o Options) scenario {
	name := fmt.Sprintf("%s.%s.svc.%s", svcEcho, e.ns, o.ClusterDomain)
	sc := scenario{name: "dns/service", from: podClient, to: "kube-dns " + e.dnsIP + ":53",
		expect: name + " -> " + e.services[svcEcho].Spec.ClusterIP,
		probe: []string{"dns", "--to", net.JoinHostPort(e.dnsIP, "53"), "--name", name,
			"--expect", e.services[svcEcho].Spec.ClusterIP}}
	if e.dnsIP == "" || e.dnsIP == "None" {
		sc.to, sc.skip = "kube-dns", "no kube-dns Service"
	}
	return sc
}

// packetScenarios: a packet as large as the path allows with DF set, and packets
// larger than the MTU without it (ICMP and UDP), across nodes where there are two.
func (e *env) packetScenarios() []scenario {
	dst := podServerB
	if len(e.nodes) < 2 {
		dst = podServerA
	}
	q := e.pods[dst]
	to := fmt.Sprintf("%s (%s)", q.name, q.node)
	udp := net.JoinHostPort(q.ip, strconv.Itoa(serverPort))
	return []scenario{
		{name: "mtu/icmp-df", from: podClient, to: to + " " + q.ip, expect: "echo of path-MTU size with DF",
			probe: []string{"ping", "--to", q.ip, "--df"}},
		{name: "fragments/icmp", from: podClient, to: to + " " + q.ip, expect: "echo of 3000 bytes, fragmented",
			probe: []string{"ping", "--to", q.ip, "--size", "3000"}},
		{name: "fragments/udp", from: podClient, to: to + " " + udp, expect: "4000-byte datagrams both ways, intact",
			probe: []string{"udp-frag", "--to", udp, "--size", "4000"}},
	}
}

// policyScenarios run with the test's NetworkPolicy (policy.go): only pods labelled
// access=allowed may reach server-b on its port.
func (e *env) policyScenarios() []scenario {
	allowed := e.podHTTP("policy/allowed", podClient, podServerB)
	allowed.policy, allowed.expect = true, "HTTP 200 (allowed by policy)"
	denied := e.podHTTP("policy/denied", podServerA, podServerB)
	denied.policy, denied.deny, denied.expect = true, true, "no answer (denied by policy)"
	return []scenario{denied, allowed}
}
