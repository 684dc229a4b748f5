/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_from_netdev: TCX ingress of the node uplink. Packets to node_ip go
 * through, in order: the reverse of masquerade (replies and ICMP errors get
 * their original destination back, lib/masq.h), the reverse of NodePort SNAT
 * (replies, and ICMP errors about the flow, get the client back as their
 * destination and the NodePort frontend as their source and leave again,
 * lib/nodeport.h), and the NodePort service lookup (lib/service.h), in both
 * host routing modes. With BPF host routing, packets for local pods (natively
 * routed, reverse-translated or DNATed) then go straight into the pod with
 * bpf_redirect_peer; everything else (and everything in legacy mode) goes to
 * the kernel stack. In tunnel mode with BPF host routing, VXLAN for a local
 * pod is decapsulated and delivered before all that (lib/tunnel.h).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/endpoint.h"
#include "lib/ipv4.h"
#include "lib/masq.h"
#include "lib/service.h"
#include "lib/tunnel.h"
#include "lib/verdict.h"

/*
 * As in myelin_from_pod (from_pod.c), the Service stage, the reject and
 * delivery are global functions, verified once each on their own: with
 * load balancing on, ~59,000 instructions instead of ~105,000.
 */
__noinline int from_netdev_lb_stage(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	if (!info || !route)
		return DROP_INVALID_PACKET;
	return lb_netdev_stage(skb, info, route);
}

__noinline int from_netdev_reject(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (!info)
		return TC_ACT_SHOT;
	return lb_reject(skb, info, DIR_FROM_NETDEV);
}

/* VXLAN for local pods, delivered without myelin_vxlan (lib/tunnel.h). */
__noinline int from_netdev_decap(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (!info)
		return TC_ACT_SHOT;
	return tunnel_decap_deliver(skb, info);
}

/* from_netdev_deliver sends the packet on as route and host routing say;
 * dir: DIR_FROM_NETDEV, or DIR_FROM_OVERLAY for what the overlay brought to
 * node_ip (from_overlay.c). */
__noinline int from_netdev_deliver(struct __sk_buff *skb, struct ipv4_info *info, int route,
				   int dir)
{
	const struct endpoint_info *ep;

	if (!info)
		return TC_ACT_SHOT;
	if (route == LB_ROUTE_OUT)
		return lb_forward_out(skb, info, dir);
	/* The node's own address is no pod's, nor is one outside the cluster
	 * CIDR: the stack takes them, no lookup. */
	if (!host_routing_bpf || info->daddr == node_ip || !cluster_contains(info->daddr))
		return verdict_pass(skb, info, dir);
	ep = endpoint_lookup(info->daddr);
	if (ep)
		return endpoint_deliver(skb, info, dir, ep);
	return verdict_pass(skb, info, dir);
}

/*
 * from_netdev_plain_pod is 0, or why a plain packet from a pod address on
 * the uplink is dropped in tunnel mode: pods reach pods of other nodes only
 * encapsulated (their sources checked by the peer rule), so one to a pod
 * address came from the underlay with a forged source; so does one to this
 * node's IP once every node encapsulates pod-to-node traffic too
 * (tunnel-pod-to-node enforce). With encapsulate, such a packet to node_ip
 * is counted (REASON_PLAIN_POD_TO_NODE, a node that still sends them) and
 * goes on. A few compares, no lookup.
 */
static __always_inline int from_netdev_plain_pod(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (!routing_tunnel || !cluster_cidr_mask || !cluster_contains(info->saddr))
		return 0;
	if (cluster_contains(info->daddr))
		return DROP_SPOOFED_SOURCE;
	if (info->daddr != node_ip || !tunnel_pod_to_node)
		return 0;
	if (tunnel_pod_to_node == TUNNEL_POD_TO_NODE_ENFORCE)
		return DROP_SPOOFED_SOURCE;
	metrics_add(DIR_FROM_NETDEV, REASON_PLAIN_POD_TO_NODE, skb->len);
	return 0;
}

SEC("tcx/ingress")
int myelin_from_netdev(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	int route = LB_ROUTE_NORMAL;
	int reason;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return verdict_pass(skb, &info, DIR_FROM_NETDEV);
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_NETDEV, DROP_INVALID_PACKET);
	/* This node's own address never arrives from outside: spoofed (docs/policy.md);
	 * nor the hairpin address, which a pod's server must only see from its own
	 * hairpin client (lib/ct.h). */
	if (info.saddr == node_ip || info.saddr == LB_HAIRPIN_ADDR)
		return verdict_drop(skb, &info, DIR_FROM_NETDEV, DROP_SPOOFED_SOURCE);
	/* Nor does a pod of this node, where the agent set its PodCIDR (lib/config.h). */
	if (local_pod_contains(info.saddr))
		return verdict_drop(skb, &info, DIR_FROM_NETDEV, DROP_SPOOFED_SOURCE);
	reason = from_netdev_plain_pod(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_NETDEV, reason);
	if (routing_tunnel && host_routing_bpf && info.proto == IPPROTO_UDP &&
	    info.daddr == node_ip) {
		reason = from_netdev_decap(skb, &info);
		if (reason != TUNNEL_DECAP_NONE)
			return reason;
	}
	reason = from_netdev_lb_stage(skb, &info, &route);
	if (reason == DROP_SVC_NO_BACKEND)
		return from_netdev_reject(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_NETDEV, reason);
	return from_netdev_deliver(skb, &info, route, DIR_FROM_NETDEV);
}
