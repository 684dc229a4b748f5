/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Local endpoints: lookup by pod IPv4 and delivery into the pod's netns. */
#ifndef MYELIN_LIB_ENDPOINT_H
#define MYELIN_LIB_ENDPOINT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ct.h"
#include "eth.h"
#include "ipv4.h"
#include "maps.h"
#include "policy.h"
#include "verdict.h"

/* endpoint_lookup returns the local endpoint owning addr (network order), or NULL. */
static __always_inline const struct endpoint_info *endpoint_lookup(__u32 addr)
{
	return bpf_map_lookup_elem(&myelin_endpoints, &addr);
}

/*
 * endpoint_vouched says whether the packet endpoint_deliver delivers (from
 * dir) comes from a pod whose source address a node checked: one of this
 * node's (myelin_from_pod validated it), or in tunnel mode one of another
 * node's, which the peer rule let in only from the node owning its PodCIDR
 * (tunnel_peer_ok: an address of the cluster CIDR passes it no other way) and
 * which that node validated where it left the pod. Its connections' entries
 * count against it (policy_ct_opener). Native routing's uplink vouches for
 * nothing: any underlay host can send any pod address there.
 */
static __always_inline __u8 endpoint_vouched(const struct ipv4_info *info, __u8 dir)
{
	if (dir == DIR_FROM_POD)
		return 1;
	return dir == DIR_FROM_OVERLAY && cluster_cidr_mask && cluster_contains(info->saddr);
}

/*
 * endpoint_deliver routes the packet as one hop (MACs of the veth pair, TTL
 * decrement) straight into the pod's netns with bpf_redirect_peer, skipping
 * the host stack and the backlog queue. An expiring TTL goes to the stack,
 * which answers with ICMP time exceeded. The pod's ingress NetworkPolicy
 * checks the packet as delivered (lib/policy.h; a drop counts under
 * DIR_TO_POD). With load balancing, a reply to a
 * service client first gets the frontend back as its source
 * (ct_reply_to_pod; myelin_to_pod does the same for what the stack delivers).
 */
static __always_inline int endpoint_deliver(struct __sk_buff *skb, struct ipv4_info *info, __u8 dir,
					    const struct endpoint_info *ep)
{
	int reason;

	if (ipv4_ttl_expired(info)) {
		policy_tx_commit(info); /* the stack answers it: no receiver check here */
		return verdict_pass(skb, info, dir);
	}
	/* BPF delivers from pods, the uplink or the overlay: no host address is exempt here. */
	reason = policy_ingress(skb, info, ep, 0, 1, endpoint_vouched(info, dir));
	if (reason)
		return verdict_drop(skb, info, DIR_TO_POD, reason);
	reason = ct_reply_to_pod(skb, info);
	if (reason)
		return verdict_drop(skb, info, dir, reason);
	if (ipv4_route_hop(skb, ep->host_mac, ep->pod_mac) < 0)
		return verdict_drop(skb, info, dir, DROP_INVALID_PACKET);
	return verdict_redirect(skb, info, dir, bpf_redirect_peer(ep->ifindex, 0));
}

#endif /* MYELIN_LIB_ENDPOINT_H */
