/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * myelin_to_pod: TCX egress of each pod's host-side veth, i.e. what the
 * kernel stack delivers into a pod (legacy host routing, or traffic the stack
 * routes with BPF host routing; bpf_redirect_peer skips this hook). With load
 * balancing, a reply to a service client gets the frontend back as its source
 * (lib/ct.h), as endpoint_deliver does for what BPF delivers. The pod's
 * ingress NetworkPolicy is checked here for everything the stack delivers
 * (lib/policy.h), what the node's own stack built may not carry a pod's
 * source (lib/host_source.h), and what another device brought in may not
 * carry the source of a pod of this node (lib/source.h), nor, with
 * tunnel-pod-to-node enforce, anything but the overlay that of a pod of
 * another node (lib/tunnel.h); a malformed IPv4
 * header is dropped; everything else passes: the stack built or routed it.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/config.h"
#include "lib/ct.h"
#include "lib/host_source.h"
#include "lib/ipv4.h"
#include "lib/policy.h"
#include "lib/source.h"
#include "lib/tunnel.h"
#include "lib/verdict.h"

SEC("tcx/egress")
int myelin_to_pod(struct __sk_buff *skb)
{
	struct ipv4_info info = {};
	int reason;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return verdict_pass(skb, &info, DIR_TO_POD);
	/* Dropped as on every other hook: unparsed, it would pass unjudged. */
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_TO_POD, DROP_INVALID_PACKET);
	reason = host_source_check(skb, &info, 0);
	if (!reason)
		reason = source_check_to_pod(skb, &info);
	if (!reason)
		reason = tunnel_check_to_pod(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_TO_POD, reason);
	/* ingress_ifindex 0: the host's own stack built the packet (kubelet probes). */
	reason = policy_ingress(skb, &info, NULL, skb->ingress_ifindex == 0, 0, 0);
	if (reason)
		return verdict_drop(skb, &info, DIR_TO_POD, reason);
	if (!lb_enabled)
		return verdict_pass(skb, &info, DIR_TO_POD);
	reason = ct_reply_to_pod(skb, &info);
	if (reason)
		return verdict_drop(skb, &info, DIR_TO_POD, reason);
	return verdict_pass(skb, &info, DIR_TO_POD);
}
