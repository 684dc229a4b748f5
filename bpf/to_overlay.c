/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_to_overlay: TCX egress of the VXLAN device myelin_vxlan, i.e. the
 * inner frame of what the node tunnels to another node, before the kernel
 * encapsulates it (BPF host routing's redirects and the stack's encap routes
 * alike). What the node's own stack built may not carry a pod's source
 * (lib/host_source.h); everything else gets HOST_SOURCE_OVERLAY in its mark,
 * which lets its encapsulation through myelin_to_netdev. The replies of
 * NodePort flows this node's own host serves (hostNetwork backends,
 * lib/service.h lb_nodeport) to a pod of another node get the NodePort
 * frontend back as their source, as myelin_to_netdev does for what leaves
 * through the uplink (lb_host_reply). Packets it passes are counted where
 * they are counted already (the program that sent them here), not again.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/host_source.h"
#include "lib/ipv4.h"
#include "lib/service.h"
#include "lib/verdict.h"

SEC("tcx/egress")
int myelin_to_overlay(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	int reason;

	if ((lb_host_replies || host_built(skb)) && skb->protocol == bpf_htons(ETH_P_IP) &&
	    ipv4_parse(skb, &info) == 0) {
		reason = host_source_check(skb, &info, 0);
		if (!reason)
			reason = lb_host_reply(skb, &info);
		if (reason)
			return verdict_drop(skb, &info, DIR_TO_NETDEV, reason);
	}
	if (host_source_on())
		skb->mark |= HOST_SOURCE_OVERLAY;
	return TC_ACT_OK;
}
