/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Forwarding to destinations that are not local endpoints: a kernel FIB
 * lookup, then bpf_redirect_neigh to the nexthop, which resolves the
 * neighbour (and queues behind ARP) like the stack would.
 */
#ifndef MYELIN_LIB_FIB_H
#define MYELIN_LIB_FIB_H

#include <linux/bpf.h>
#include <linux/socket.h>
#include <bpf/bpf_helpers.h>

#include "ipv4.h"
#include "verdict.h"

#ifndef AF_INET
#define AF_INET 2
#endif

/* fib_redirect_neigh sends the packet to the FIB's nexthop on the FIB's device. */
static __always_inline int fib_redirect_neigh(struct __sk_buff *skb, const struct ipv4_info *info,
					      __u8 dir, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh = {
		.nh_family = AF_INET,
		.ipv4_nh = fib->ipv4_dst, /* the FIB replaced dst with the gateway, if any */
	};

	if (ipv4_ttl_expired(info))
		return verdict_pass(skb, info, dir);
	if (ipv4_dec_ttl(skb) < 0)
		return verdict_drop(skb, info, dir, DROP_INVALID_PACKET);
	return verdict_redirect(skb, info, dir,
				bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0));
}

/*
 * fib_lookup_ingress asks the FIB where the stack would route the parsed
 * packet that came in on skb's ingress device (the bpf_fib_lookup return
 * code; fib gets the answer). BPF_FIB_LOOKUP_SKIP_NEIGH: see fib_forward.
 */
static __always_inline long fib_lookup_ingress(struct __sk_buff *skb, const struct ipv4_info *info,
					       struct bpf_fib_lookup *fib)
{
	*fib = (struct bpf_fib_lookup){
		.family = AF_INET,
		.tos = info->tos,
		.l4_protocol = info->proto,
		.ipv4_src = info->saddr,
		.ipv4_dst = info->daddr,
		.ifindex = skb->ingress_ifindex,
	};
	return bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
}

/*
 * fib_forward routes by the kernel FIB. tot_len is left 0 on purpose: the
 * kernel then checks the skb itself against the egress MTU, which is right
 * for GSO packets whose IP total length exceeds the MTU.
 * BPF_FIB_LOOKUP_SKIP_NEIGH: bpf_redirect_neigh resolves the neighbour (or
 * queues behind ARP) anyway, so the lookup does not look it up first; a
 * nexthop without one is SUCCESS too, MTU-checked like any other.
 *
 * Outcomes: SUCCESS forwards; BLACKHOLE drops with DROP_NO_ROUTE, as the
 * stack would; everything else (local destination, forwarding disabled,
 * unreachable/prohibit routes that owe the sender an ICMP error, frag needed,
 * lookup errors) goes to the stack, which does what a plain router does.
 */
static __always_inline int fib_forward(struct __sk_buff *skb, const struct ipv4_info *info,
				       __u8 dir)
{
	struct bpf_fib_lookup fib;
	long rc = fib_lookup_ingress(skb, info, &fib);

	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		return fib_redirect_neigh(skb, info, dir, &fib);
	case BPF_FIB_LKUP_RET_BLACKHOLE:
		return verdict_drop(skb, info, dir, DROP_NO_ROUTE);
	default:
		return verdict_pass(skb, info, dir);
	}
}

#endif /* MYELIN_LIB_FIB_H */
