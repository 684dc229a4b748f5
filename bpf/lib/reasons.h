/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Directions and reasons: the two axes of myelin_metrics and the labels of
 * every event. The numbers are ABI with the agent (internal/datapath/reasons.go
 * names them); append, never renumber.
 */
#ifndef MYELIN_LIB_REASONS_H
#define MYELIN_LIB_REASONS_H

/* direction says which program saw the packet. */
enum direction {
	DIR_FROM_POD = 0,     /* myelin_from_pod: leaving a pod */
	DIR_FROM_NETDEV = 1,  /* myelin_from_netdev: arriving on the uplink */
	DIR_TO_NETDEV = 2,    /* myelin_to_netdev: leaving through the uplink (and
			       * myelin_to_overlay's drops: leaving through the overlay) */
	DIR_FROM_OVERLAY = 3, /* myelin_from_overlay: decapsulated, VXLAN device ingress */
	DIR_TO_POD = 4,	      /* myelin_to_pod: the stack delivers into a pod (host veth egress) */
	METRIC_DIRS = 5,
};

/* reason is the outcome of a packet; drops are the DROP_* values. */
enum reason {
	/* Redirected by BPF to its next hop (peer veth or FIB nexthop). */
	REASON_FORWARDED = 0,
	/* Handed to the kernel stack (legacy mode, not ours, needs ICMP, ...). */
	REASON_PASS_STACK = 1,
	/* IPv4 header malformed or packet shorter than the header says. */
	DROP_INVALID_PACKET = 2,
	/* FIB says the destination is a blackhole route. */
	DROP_NO_ROUTE = 3,
	/* A redirect helper refused the packet (returned other than TC_ACT_REDIRECT). */
	DROP_REDIRECT_FAILED = 4,
	/* bpf_skb_set_tunnel_key refused the tunnel metadata (tunnel mode). */
	DROP_TUNNEL_KEY = 5,
	/* Masquerade: myelin_snat is full, the flow's NAT entries can't be created. */
	DROP_NAT_FULL = 6,
	/* Masquerade: every NAT port tried for the flow's destination is taken. */
	DROP_NAT_NO_PORT = 7,
	/*
	 * Service load balancing: the service has no ready backend. The packet
	 * is answered with ICMP port unreachable (as kube-proxy's REJECT does)
	 * instead of being dropped silently.
	 */
	DROP_SVC_NO_BACKEND = 8,
	/*
	 * A pod sent a packet whose source IPv4 address or source MAC is not its
	 * endpoint's own (the endpoint owning the veth it came in on): a forged
	 * pod, node, service or outside address. Also a packet from this node's
	 * own address arriving on the uplink or out of the overlay (forged: it
	 * would pass as the node's own traffic, docs/policy.md). And what the
	 * node's own stack sends from a pod address, or as VXLAN myelin_vxlan
	 * did not encapsulate (lib/host_source.h).
	 */
	DROP_SPOOFED_SOURCE = 9,
	/* A pod sent something other than IPv4 or ARP (IPv6 is not supported yet). */
	DROP_UNSUPPORTED_L3 = 10,
	/* A VXLAN packet came from an address that is not the node owning its inner source. */
	DROP_UNKNOWN_TUNNEL_PEER = 11,
	/* NodePort: the table of NodePort SNAT flows (myelin_nodeport_nat) is full. */
	DROP_NODEPORT_NAT_FULL = 12,
	/* A later IPv4 fragment whose first fragment (carrying the ports) was not seen. */
	DROP_FRAG_NO_FLOW = 13,
	/*
	 * A pod sent an IPIP, IPv6-in-IPv4 or GRE packet to a cluster address
	 * (a pod, a node, ipv4-native-routing-cidr, non-masquerade-cidrs): a
	 * decapsulating device on a node would deliver its inner packet, whose
	 * source nothing checked (lib/source.h, source_check_tunnel).
	 */
	DROP_POD_TUNNEL = 14,
	/*
	 * Service load balancing: the conntrack table of the flow's kind
	 * (myelin_lb_ct for pods' flows, myelin_lb_ct_nodeport for NodePort
	 * clients) is full, the new flow's entries can't be created. 20, not
	 * 15: numbers 15-19 are left to the other hardening changes.
	 */
	DROP_SVC_CT_FULL = 20,
	/*
	 * NetworkPolicy: no policy selecting the isolated pod allows the packet.
	 * Egress drops are counted under DIR_FROM_POD, ingress drops under
	 * DIR_TO_POD (whichever program delivers into the pod).
	 */
	DROP_POLICY_DENIED = 21,
	/*
	 * NetworkPolicy: no allow matched, and the agent could not write every
	 * allow of this pod's direction (map full, too many port ranges,
	 * something the datapath can't represent): fail closed, and say why.
	 */
	DROP_POLICY_MAP_FULL = 22,
	/*
	 * NetworkPolicy: the connection would need a new myelin_policy_ct entry
	 * for a pod that holds more than its budget of them (policy-ct-pod-max,
	 * myelin_policy_ct_over): it is not tracked and not let through, so its
	 * flood can't evict the other pods' connections.
	 */
	DROP_POLICY_CT_BUDGET = 23,
	/*
	 * Masquerade: the pod's new flow would need NAT entries while it holds
	 * more masqueraded flows than its budget (nat-pod-max,
	 * myelin_snat_over), so its flood can't fill myelin_snat for every pod.
	 */
	DROP_NAT_BUDGET = 24,
	/*
	 * Service load balancing: the pod's new Service flow would need
	 * myelin_lb_ct entries while it holds more than its budget of them
	 * (lb-ct-pod-max, myelin_lb_ct_over), so its flood can't fill the table
	 * for every pod.
	 */
	DROP_SVC_CT_BUDGET = 25,
	/*
	 * Not a verdict: a plain packet from a pod address to this node's IP
	 * arrived on the uplink while tunnel-pod-to-node is encapsulate (a
	 * node that does not encapsulate them yet, or a forger); it goes on.
	 * Before enforce drops them, this count should stay still.
	 */
	REASON_PLAIN_POD_TO_NODE = 60,
	/*
	 * Not a verdict: a DNS or drop flow record was not written, its budget
	 * (lib/flows.h, flows_allow) was spent for this window.
	 */
	REASON_FLOWS_LIMITED = 61,
	/* Not a verdict: a flow record could not be written (flow ring buffer full). */
	REASON_FLOWS_LOST = 62,
	/* Not a verdict: a ring buffer event could not be written (buffer full). */
	REASON_EVENTS_LOST = 63,
	METRIC_REASONS = 64,
};

#endif /* MYELIN_LIB_REASONS_H */
