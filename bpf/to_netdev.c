/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_to_netdev: TCX egress of the node uplink, i.e. every packet leaving
 * the node, whoever routed it (BPF host routing's bpf_redirect_neigh or the
 * kernel stack). The replies of NodePort flows this node's own host serves
 * (hostNetwork backends) get the NodePort frontend back as their source
 * (lb_host_reply, lib/service.h). With masquerading on, pod traffic to
 * destinations outside the cluster leaves with the node's IP as its source
 * (lib/masq.h). What the node's own stack built may not carry a pod's
 * source nor be VXLAN that myelin_vxlan did not encapsulate
 * (lib/host_source.h). Everything else passes untouched.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/host_source.h"
#include "lib/ipv4.h"
#include "lib/masq.h"
#include "lib/service.h"
#include "lib/verdict.h"

SEC("tcx/egress")
int myelin_to_netdev(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	int reason;

	if ((!masq_enabled && !lb_host_replies && !host_built(skb)) ||
	    skb->protocol != bpf_htons(ETH_P_IP))
		return verdict_pass(skb, &info, DIR_TO_NETDEV);
	/*
	 * The node's stack built or routed what it sends: a header we can't
	 * parse (say, BIG TCP's zero total length) is not ours to translate
	 * or drop.
	 */
	if (ipv4_parse(skb, &info) < 0)
		return verdict_pass(skb, &info, DIR_TO_NETDEV);
	reason = host_source_check(skb, &info, routing_tunnel);
	if (!reason)
		reason = lb_host_reply(skb, &info);
	if (!reason)
		reason = masq_egress(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_TO_NETDEV, reason);
	return verdict_pass(skb, &info, DIR_TO_NETDEV);
}
