/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet header rewrites. */
#ifndef MYELIN_LIB_ETH_H
#define MYELIN_LIB_ETH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

/* eth_set_macs rewrites both MACs. Returns 0, or -1 if the header is not linear. */
static __always_inline int eth_set_macs(struct __sk_buff *skb, const __u8 *src, const __u8 *dst)
{
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = (void *)(long)skb->data;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	return 0;
}

#endif /* MYELIN_LIB_ETH_H */
