/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv4 header access: validation, the fields the datapath decides on, and the
 * TTL decrement of a forwarding hop.
 */
#ifndef MYELIN_LIB_IPV4_H
#define MYELIN_LIB_IPV4_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "types.h"

#define IPV4_FRAG_OFFSET_MASK 0x1fff
#define IPV4_FRAG_MF	      0x2000
#define IPV4_CSUM_OFF	      (ETH_HLEN + offsetof(struct iphdr, check))

/* ipv4_info holds the header fields read once at parse time. */
struct ipv4_info {
	__u32 saddr;  /* network order */
	__u32 daddr;  /* network order */
	__u16 l4_off; /* L4 header offset; 0 for later fragments and non-IPv4 */
	__u8 proto;
	__u8 ttl;
	__u8 tos;
	__u8 frag;	/* enum ipv4_frag bits; 0 for a whole datagram */
	__u16 svc_port; /* the Service frontend port it was addressed to (network order) */
	__u32 svc_addr; /* the Service frontend before translation (lb_dnat), else 0 */
	/* lib/policy.h: the egress check found the packet's connection tracked
	 * at its receiving end too (a pod of this node), so the ingress check of
	 * the same packet, unchanged, needs no lookup of its own
	 * (enum policy_rx; POLICY_RX_CLOSING: policy_ct is what it found;
	 * POLICY_RX_SELF: a hairpin packet, which no check judges). */
	__u8 policy_rx_tracked;
	/* lib/policy.h: the egress check of this packet, a SYN, allowed it with
	 * this end bit and left the write of its fresh entry to whoever delivers
	 * it (0: nothing pending; policy_tx_commit). */
	__u8 policy_tx_fresh;
	__be16 policy_tx_sport; /* with policy_tx_fresh: the SYN's ports, for its entry's key */
	__be16 policy_tx_dport;
	/* lib/policy.h: the connection's entry as the egress check read it
	 * (valid with POLICY_RX_CLOSING). */
	struct policy_ct_entry policy_ct;
};

/* ipv4_frag says which part of a fragmented datagram a packet is. */
enum ipv4_frag {
	IPV4_FRAG_MORE = 1,  /* MF set: more fragments follow */
	IPV4_FRAG_LATER = 2, /* offset > 0: no L4 header, l4_off is 0 */
};

/*
 * ipv4_header returns the IPv4 header if it lies in the linear data, else
 * NULL. Read-only: the programs write the packet only through helpers (see
 * ipv4_route_hop).
 */
static __always_inline const struct iphdr *ipv4_header(struct __sk_buff *skb)
{
	void *data_end = (void *)(long)skb->data_end;
	const struct iphdr *ip = (void *)(long)skb->data + ETH_HLEN;

	if ((void *)(ip + 1) > data_end)
		return NULL;
	return ip;
}

/*
 * ipv4_header_pull is ipv4_header that first pulls the header into the linear
 * data when it sits in paged data.
 * HAZARD: bpf_skb_pull_data invalidates every packet pointer the caller holds.
 */
static __always_inline const struct iphdr *ipv4_header_pull(struct __sk_buff *skb)
{
	const struct iphdr *ip = ipv4_header(skb);

	if (ip)
		return ip;
	if (bpf_skb_pull_data(skb, ETH_HLEN + sizeof(*ip)) < 0)
		return NULL;
	return ipv4_header(skb);
}

/*
 * ipv4_parse validates the IPv4 header behind the Ethernet header as ip_rcv
 * does (version, IHL, total length within the packet), but not its checksum,
 * and fills info. So state a packet's addresses and ports key (conntrack,
 * NAT, policy tracking) may change for a packet the receiving stack then drops
 * for a bad checksum: what the sender could change with a valid one as well.
 * A TCP GSO packet with total length 0 is BIG TCP (GRO or the stack built a
 * packet beyond 64 KiB): its length is the skb's, as iph_totlen says.
 * Returns 0, or -1 for a malformed or truncated packet. Packets too short
 * for a header leave info zeroed.
 */
static __always_inline int ipv4_parse(struct __sk_buff *skb, struct ipv4_info *info)
{
	const struct iphdr *ip;
	__u32 hlen, tot_len;

	if (skb->len < ETH_HLEN + sizeof(*ip))
		return -1;
	ip = ipv4_header_pull(skb);
	if (!ip)
		return -1;
	/* Filled before validation so a drop event shows who sent the packet. */
	info->saddr = ip->saddr;
	info->daddr = ip->daddr;
	info->proto = ip->protocol;
	info->ttl = ip->ttl;
	info->tos = ip->tos;
	info->l4_off = 0;
	info->frag = 0;

	hlen = ip->ihl * 4;
	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len == 0 && skb->gso_size && ip->protocol == IPPROTO_TCP)
		tot_len = skb->len - ETH_HLEN;
	if (ip->version != 4 || hlen < sizeof(*ip) || tot_len < hlen ||
	    tot_len > skb->len - ETH_HLEN)
		return -1;
	if (!(ip->frag_off & bpf_htons(IPV4_FRAG_OFFSET_MASK)))
		info->l4_off = ETH_HLEN + hlen;
	else
		info->frag = IPV4_FRAG_LATER;
	if (ip->frag_off & bpf_htons(IPV4_FRAG_MF))
		info->frag |= IPV4_FRAG_MORE;
	return 0;
}

/* ipv4_first_frag says whether the packet starts a fragmented datagram (MF, offset 0). */
static __always_inline int ipv4_first_frag(const struct ipv4_info *info)
{
	return info->frag == IPV4_FRAG_MORE;
}

/* ipv4_later_frag says whether the packet is a fragment after the first: it has no ports. */
static __always_inline int ipv4_later_frag(const struct ipv4_info *info)
{
	return info->frag & IPV4_FRAG_LATER;
}

/* ipv4_ttl_expired says whether forwarding must leave the packet to the stack for ICMP. */
static __always_inline int ipv4_ttl_expired(const struct ipv4_info *info)
{
	return info->ttl <= 1;
}

/*
 * One hop's rewrite is written with bpf_skb_store_bytes, never through a
 * packet pointer: a program that writes the packet directly gets the
 * verifier's prologue, which calls bpf_skb_pull_data for every cloned skb
 * (each TCP segment a pod sends: TCP transmits clones) before the program
 * starts, and patching the checksum took bpf_l3_csum_replace on top; one
 * store is one helper call (docs/datapath.md, "What an established packet
 * costs"; TestPrivilegedNoDirectPacketWrites).
 */

/* ipv4_ttl_csum is the 4 bytes from the TTL on: TTL, protocol, header checksum. */
struct ipv4_ttl_csum {
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
};

/*
 * ipv4_ttl_csum_of fills t from header ip with the TTL one less and the
 * checksum patched incrementally (RFC 1624), as the kernel's
 * ip_decrease_ttl does.
 */
static __always_inline void ipv4_ttl_csum_of(const struct iphdr *ip, struct ipv4_ttl_csum *t)
{
	__u32 check = (__u32)ip->check + bpf_htons(0x0100);

	t->ttl = ip->ttl - 1;
	t->protocol = ip->protocol;
	t->check = (__sum16)(check + (check >= 0xffff));
}

/*
 * ipv4_dec_ttl decrements the TTL and patches the header checksum. Returns
 * 0, or a negative value on failure.
 * HAZARD: bpf_skb_store_bytes invalidates every packet pointer.
 */
static __always_inline int ipv4_dec_ttl(struct __sk_buff *skb)
{
	const struct iphdr *ip = ipv4_header(skb);
	struct ipv4_ttl_csum t;

	if (!ip)
		return -1;
	ipv4_ttl_csum_of(ip, &t);
	return bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct iphdr, ttl), &t, sizeof(t), 0);
}

/*
 * ipv4_route_hop routes the packet one hop in one write: MACs src and dst,
 * the TTL one less, the header checksum patched (the 26 bytes from the
 * Ethernet header to the checksum; the EtherType and the IPv4 bytes before
 * the TTL written back as they are). Returns 0, or a negative value on
 * failure.
 * HAZARD: bpf_skb_store_bytes invalidates every packet pointer.
 */
static __always_inline int ipv4_route_hop(struct __sk_buff *skb, const __u8 *src, const __u8 *dst)
{
	struct {
		__u8 dst[ETH_ALEN];
		__u8 src[ETH_ALEN];
		__u8 kept[2 + offsetof(struct iphdr, ttl)]; /* EtherType to fragment offset */
		struct ipv4_ttl_csum t;
	} h;
	const struct iphdr *ip = ipv4_header(skb);

	if (!ip)
		return -1;
	__builtin_memcpy(h.dst, dst, ETH_ALEN);
	__builtin_memcpy(h.src, src, ETH_ALEN);
	__builtin_memcpy(h.kept, (const __u8 *)ip - 2, sizeof(h.kept));
	ipv4_ttl_csum_of(ip, &h.t);
	return bpf_skb_store_bytes(skb, 0, &h, sizeof(h), 0);
}

/* csum_fold folds a 32-bit one's complement sum (as bpf_csum_diff returns
 * it) into the 16-bit Internet checksum. */
static __always_inline __u16 csum_fold(__s64 csum)
{
	__u32 sum = (__u32)csum;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* ipv4_header_csum returns the checksum of a 20-byte IPv4 header whose check is 0. */
static __always_inline __u16 ipv4_header_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += w[i];
	return csum_fold(sum);
}

#endif /* MYELIN_LIB_IPV4_H */
