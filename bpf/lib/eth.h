/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet header reads and rewrites. */
#ifndef MYELIN_LIB_ETH_H
#define MYELIN_LIB_ETH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

/*
 * eth_set_macs rewrites both MACs. Returns 0, or a negative value on failure.
 * With bpf_skb_store_bytes, not through a packet pointer (lib/ipv4.h,
 * ipv4_route_hop, says why). HAZARD: invalidates every packet pointer.
 */
static __always_inline int eth_set_macs(struct __sk_buff *skb, const __u8 *src, const __u8 *dst)
{
	__u8 macs[2 * ETH_ALEN];

	__builtin_memcpy(macs, dst, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, src, ETH_ALEN);
	return bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
}

/*
 * eth_header is the packet's Ethernet header in the linear data, or NULL.
 * Fresh (volatile) reads of the bounds, as l4_linear (lib/l4.h) does: reusing
 * an earlier load of skb->data, clang may keep it in a 32-bit register, which
 * the verifier no longer takes for a packet pointer. Good until the next
 * helper call that may change the packet.
 */
static __always_inline const struct ethhdr *eth_header(struct __sk_buff *skb)
{
	void *data_end = (void *)(long)*(volatile __u32 *)&skb->data_end;
	const struct ethhdr *eth = (void *)(long)*(volatile __u32 *)&skb->data;

	if ((void *)(eth + 1) > data_end)
		return NULL;
	return eth;
}

#endif /* MYELIN_LIB_ETH_H */
