/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors built by the datapath: a packet to a service without ready
 * backends is turned, in place, into the ICMP port unreachable kube-proxy's
 * REJECT would send (RFC 792: the offending IPv4 header and the first 8
 * bytes after it quoted), from the frontend to the client. Linux aborts a
 * connect() in SYN_SENT with ECONNREFUSED on it, and reports it to a
 * connected UDP socket.
 */
#ifndef MYELIN_LIB_ICMP_H
#define MYELIN_LIB_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "eth.h"
#include "ipv4.h"
#include "l4.h"

#define ICMP_PORT_UNREACH  3
#define ICMP_ERROR_TTL	   64
#define ICMP_ERROR_TOS	   0xc0 /* IPTOS_PREC_INTERNETCONTROL, as the kernel's icmp_send */
#define ICMP_QUOTE_L4	   8	/* bytes of the offending L4 header quoted */
#define ICMP_QUOTE_MAX	   (60 + ICMP_QUOTE_L4)
#define ICMP_ERROR_HDR_LEN (sizeof(struct iphdr) + sizeof(struct icmp_echo_hdr))

/* icmp_error is the new IPv4 packet: header, ICMP header, quote. */
struct icmp_error {
	struct iphdr ip;
	struct icmp_echo_hdr icmp; /* id and seq are the "unused" word, 0 */
	__u8 quote[ICMP_QUOTE_MAX];
};

/* csum_fold folds a bpf_csum_diff sum into the 16-bit Internet checksum. */
static __always_inline __u16 csum_fold(__s64 csum)
{
	__u32 sum = (__u32)csum;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* icmp_fill writes the headers and checksums of e around its quote of qlen bytes. */
static __always_inline int icmp_fill(struct icmp_error *e, const struct ipv4_info *info, __u32 qlen)
{
	__s64 csum;

	e->ip.version = 4;
	e->ip.ihl = sizeof(e->ip) / 4;
	e->ip.tos = ICMP_ERROR_TOS;
	e->ip.tot_len = bpf_htons(ICMP_ERROR_HDR_LEN + qlen);
	e->ip.ttl = ICMP_ERROR_TTL;
	e->ip.protocol = IPPROTO_ICMP;
	e->ip.saddr = info->daddr; /* from the frontend the client addressed */
	e->ip.daddr = info->saddr;
	csum = bpf_csum_diff(NULL, 0, (__be32 *)&e->ip, sizeof(e->ip), 0);
	if (csum < 0)
		return -1;
	e->ip.check = csum_fold(csum);
	e->icmp.type = ICMP_DEST_UNREACH;
	e->icmp.code = ICMP_PORT_UNREACH;
	/* qlen is a multiple of 4, as bpf_csum_diff requires: IHL * 4 + 8. */
	csum = bpf_csum_diff(NULL, 0, (__be32 *)&e->icmp, sizeof(e->icmp) + qlen, 0);
	if (csum < 0)
		return -1;
	e->icmp.checksum = csum_fold(csum);
	return 0;
}

/*
 * icmp_port_unreach rewrites the packet (a first fragment, info as parsed,
 * untranslated) into ICMP port unreachable from its destination to its
 * source, with swapped MACs, ready to be sent back where it came from.
 * Returns 0, or -1 with the packet in an undefined state (drop it).
 * Written with BPF_F_RECOMPUTE_CSUM so a CHECKSUM_COMPLETE skb stays
 * consistent. HAZARD: a CHECKSUM_PARTIAL skb (a pod's TCP or UDP) keeps its
 * csum_start/offset, now inside the quote; it is delivered straight into
 * the pod, whose stack takes it as verified and never completes it.
 * bpf_skb_change_tail invalidates every packet pointer; eth_set_macs
 * re-derives its own.
 */
static __always_inline int icmp_port_unreach(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct icmp_error e = {};
	struct ethhdr eth;
	__u32 qlen;

	if (!info->l4_off)
		return -1;
	qlen = info->l4_off - ETH_HLEN + ICMP_QUOTE_L4;
	/*
	 * Keep qlen in one register: clang otherwise checks one copy and
	 * passes a recomputed one, whose bounds the verifier does not know.
	 */
	asm volatile("" : "+r"(qlen));
	if (qlen > ICMP_QUOTE_MAX || qlen < sizeof(struct iphdr) + ICMP_QUOTE_L4)
		return -1;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, e.quote, qlen) < 0)
		return -1;
	if (icmp_fill(&e, info, qlen) < 0)
		return -1;
	if (bpf_skb_change_tail(skb, ETH_HLEN + ICMP_ERROR_HDR_LEN + qlen, 0) < 0)
		return -1;
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &e, ICMP_ERROR_HDR_LEN + qlen,
				BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	return eth_set_macs(skb, eth.h_dest, eth.h_source);
}

#endif /* MYELIN_LIB_ICMP_H */
