/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_from_overlay: TCX ingress of the VXLAN device myelin_vxlan, i.e.
 * tunnelled packets after decapsulation (the inner Ethernet frame). In both
 * host routing modes only IPv4 from the node owning its inner source goes
 * further (tunnel_peer_check); nothing else is tunnelled. With BPF
 * host routing, packets for local pods go straight into the pod with
 * bpf_redirect_peer; everything else (and everything in legacy mode) goes to
 * the kernel stack.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/endpoint.h"
#include "lib/ipv4.h"
#include "lib/tunnel.h"
#include "lib/verdict.h"

SEC("tcx/ingress")
int myelin_from_overlay(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	const struct endpoint_info *ep;
	int reason;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_UNSUPPORTED_L3);
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_INVALID_PACKET);
	/* This node's own address never arrives from outside: spoofed (docs/policy.md). */
	if (info.saddr == node_ip)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_SPOOFED_SOURCE);
	reason = tunnel_peer_check(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, reason);
	if (!host_routing_bpf)
		return verdict_pass(skb, &info, DIR_FROM_OVERLAY);

	ep = endpoint_lookup(info.daddr);
	if (ep)
		return endpoint_deliver(skb, &info, DIR_FROM_OVERLAY, ep);
	return verdict_pass(skb, &info, DIR_FROM_OVERLAY);
}
