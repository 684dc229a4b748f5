/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_from_pod: TCX ingress of each pod's host-side veth, i.e. every
 * packet leaving a pod. First the source is validated (lib/source.h): only
 * IPv4 from the endpoint's own address and MAC, and its ARP, go further;
 * a pod is untrusted. With load balancing, packets to a service frontend
 * are first translated to a backend, and replies of NodePort and hairpin
 * flows back to the frontend (lib/service.h). Then the pod's egress
 * NetworkPolicy (lib/policy.h) checks the translated packet (an ICMP error
 * by its quote as the pod wrote it, or as the Service stage rewrote it for
 * another destination). BPF host routing delivers to
 * local pods with bpf_redirect_peer, in tunnel mode to pods of other nodes
 * (and, with tunnel-pod-to-node, to other nodes' IPs) through the overlay,
 * and to everything else via FIB +
 * bpf_redirect_neigh; legacy mode hands packets to the kernel stack (which,
 * in tunnel mode, encapsulates by the agent's encap routes).
 *
 * A pod's IPIP, 6in4 and GRE packets to cluster addresses are dropped with
 * the source checks: their inner source is not checked (source_check_tunnel).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/endpoint.h"
#include "lib/fib.h"
#include "lib/ipv4.h"
#include "lib/policy.h"
#include "lib/service.h"
#include "lib/source.h"
#include "lib/tunnel.h"
#include "lib/verdict.h"

/*
 * After its source checks the program runs in stages, each a global
 * function: the Service stage (from_pod_lb_stage, and from_pod_reject for a
 * Service without backends), the egress policy check of an isolated pod
 * (from_pod_policy) and delivery (from_pod_deliver). The verifier checks a
 * global function once, on its own, where it checked inlined code once for
 * every state the code before it left: with load balancing on, the program
 * as one inlined function took ~266,000 instructions and ~0.5 s to verify,
 * most of an agent's start (docs/scale.md). Each stage costs a BPF-to-BPF
 * call (docs/datapath.md, "Program stages"). The verifier takes a global
 * function's pointers for possibly NULL, hence the checks; they always
 * point to the program's stack.
 */

/* from_pod_lb_stage translates Service traffic (lib/service.h): 0 or a drop reason. */
__noinline int from_pod_lb_stage(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	if (!info || !route)
		return DROP_INVALID_PACKET;
	return lb_pod_stage(skb, info, route);
}

/* from_pod_reject answers a packet to a Service without backends (lb_reject). */
__noinline int from_pod_reject(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (!info)
		return TC_ACT_SHOT;
	return lb_reject(skb, info, DIR_FROM_POD);
}

/*
 * from_pod_policy: 0 when the isolated pod may send the packet, else why
 * not. A NodePort flow's reply the Service stage translated back (route
 * LB_ROUTE_OUT) is judged on the destination the pod sent it to.
 */
__noinline int from_pod_policy(struct __sk_buff *skb, struct ipv4_info *info,
			       struct policy_tuple *pt, int route)
{
	if (!info || !pt)
		return DROP_INVALID_PACKET;
	return policy_egress(skb, info, pt, route == LB_ROUTE_OUT);
}

/* from_pod_deliver sends the packet on as route and host routing say. */
__noinline int from_pod_deliver(struct __sk_buff *skb, struct ipv4_info *info, int route)
{
	const struct endpoint_info *ep = NULL;
	const struct tunnel_endpoint *te;

	if (!info)
		return TC_ACT_SHOT;
	/* An allowed SYN's entry is written by the receiver's check when BPF
	 * delivers it to a local pod (endpoint_deliver), else here. A pod's
	 * address is in the cluster CIDR (the agent refuses a PodCIDR outside
	 * it): packets out of the cluster skip the lookup. */
	if (route != LB_ROUTE_OUT && (host_routing_bpf || route == LB_ROUTE_LOCAL) &&
	    cluster_contains(info->daddr))
		ep = endpoint_lookup(info->daddr);
	if (!ep)
		policy_tx_commit(info);
	if (route == LB_ROUTE_OUT)
		return lb_forward_out(skb, info, DIR_FROM_POD);
	if (!host_routing_bpf && route != LB_ROUTE_LOCAL)
		return verdict_pass(skb, info, DIR_FROM_POD);
	if (ep)
		return endpoint_deliver(skb, info, DIR_FROM_POD, ep);
	if (routing_tunnel) {
		te = tunnel_lookup(info->daddr);
		if (!te && tunnel_pod_to_node)
			te = tunnel_node_lookup(info->daddr);
		if (te)
			return tunnel_encap_redirect(skb, info, DIR_FROM_POD, te);
	}
	return fib_forward(skb, info, DIR_FROM_POD);
}

SEC("tcx/ingress")
int myelin_from_pod(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	struct policy_tuple pt = {};
	const struct endpoint_info *src_ep = NULL;
	int isolated;
	int route = LB_ROUTE_NORMAL;
	int reason;

	reason = source_check_l2(skb);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_POD, reason);
	if (skb->protocol != bpf_htons(ETH_P_IP)) {
		reason = source_check_other(skb, &info);
		if (reason)
			return verdict_drop(skb, &info, DIR_FROM_POD, reason);
		return verdict_pass(skb, &info, DIR_FROM_POD);
	}
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_POD, DROP_INVALID_PACKET);
	reason = source_check_ipv4(skb, &info, &src_ep);
	if (!reason)
		reason = source_check_tunnel(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_POD, reason);
	isolated = policy_egress_begin(skb, &info, src_ep, &pt);
	reason = from_pod_lb_stage(skb, &info, &route);
	if (reason == DROP_SVC_NO_BACKEND)
		return from_pod_reject(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_POD, reason);
	/* A hairpin flow (route LB_ROUTE_LOCAL: a pod reaching itself through
	 * a Service, both ways) goes back into its sender, which no policy
	 * isolates from itself: as over the pod's loopback with socket-LB. */
	if (isolated && route == LB_ROUTE_LOCAL && info.daddr == pt.saddr)
		info.policy_rx_tracked = POLICY_RX_SELF;
	else if (isolated) {
		reason = from_pod_policy(skb, &info, &pt, route);
		if (reason)
			return verdict_drop(skb, &info, DIR_FROM_POD, reason);
	}
	return from_pod_deliver(skb, &info, route);
}
