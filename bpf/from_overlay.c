/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_from_overlay: TCX ingress of the VXLAN device myelin_vxlan, i.e.
 * tunnelled packets after decapsulation (the inner Ethernet frame). In both
 * host routing modes only IPv4 from the node owning its inner source goes
 * further (tunnel_peer_check); nothing else is tunnelled. Packets to this
 * node's IP (pods of other nodes with tunnel-pod-to-node, and the replies of
 * NodePort flows this node forwarded to their backends) take the uplink's
 * Service stage, as they would arriving plain. With
 * BPF host routing, packets for local pods go straight into the pod with
 * bpf_redirect_peer; everything else (and everything in legacy mode) goes to
 * the kernel stack.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/endpoint.h"
#include "lib/icmp.h"
#include "lib/ipv4.h"
#include "lib/service.h"
#include "lib/tunnel.h"
#include "lib/verdict.h"

/*
 * from_overlay_reject turns a request to a NodePort without ready backends
 * into lb_reject's answer, ICMP port unreachable, parsed into info, to be sent
 * through the overlay to the pod of the node that sent the request
 * (LB_ROUTE_OUT): myelin_vxlan's egress has no tunnel metadata for a frame
 * sent back where it came from. The drop is counted; the answer is counted
 * as forwarded. -1: nothing to answer (rate limit), drop it. Not inlined:
 * its rewrite's stack is not on delivery's deepest chain.
 */
__noinline int from_overlay_reject(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (!info)
		return -1;
	verdict_count_drop(skb, info, DIR_FROM_OVERLAY, DROP_SVC_NO_BACKEND);
	if (!icmp_reject_allowed() || icmp_port_unreach(skb, info) < 0)
		return -1;
	__builtin_memset(info, 0, sizeof(*info));
	return ipv4_parse(skb, info) < 0 ? -1 : 0;
}

SEC("tcx/ingress")
int myelin_from_overlay(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	int route = LB_ROUTE_NORMAL;
	int reason;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_UNSUPPORTED_L3);
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_INVALID_PACKET);
	/* This node's own address never arrives from outside: spoofed (docs/policy.md);
	 * nor the hairpin address (from_netdev.c). */
	if (info.saddr == node_ip || info.saddr == LB_HAIRPIN_ADDR)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_SPOOFED_SOURCE);
	reason = tunnel_peer_check(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, reason);
	/* To this node's IP: the uplink's Service stage (from_netdev.c). */
	if (info.daddr == node_ip) {
		reason = from_netdev_lb_stage(skb, &info, &route);
		if (reason == DROP_SVC_NO_BACKEND) {
			if (from_overlay_reject(skb, &info) < 0)
				return TC_ACT_SHOT;
			route = LB_ROUTE_OUT;
		} else if (reason) {
			return verdict_drop(skb, &info, DIR_FROM_OVERLAY, reason);
		}
	}
	/* Delivery as from the uplink: a global function, so its stack and this
	 * program's are not added up beyond what myelin_from_netdev's are. */
	return from_netdev_deliver(skb, &info, route, DIR_FROM_OVERLAY);
}
