/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors built by the datapath: a packet to a service without ready
 * backends is turned, in place, into the ICMP port unreachable kube-proxy's
 * REJECT would send (RFC 792: the offending IPv4 header and the first 8
 * bytes after it quoted), from the frontend to the client. Linux aborts a
 * connect() in SYN_SENT with ECONNREFUSED on it, and reports it to a
 * connected UDP socket. These answers are rate-limited per CPU
 * (icmp_reject_allowed).
 *
 * ICMP errors about translated packets: icmp_quote_parse reads the packet an
 * error quotes, icmp_quote_set_addr rewrites its addresses; masquerade
 * (masq.h), service conntrack (ct.h) and NodePort SNAT (nodeport.h)
 * translate the quote back with them.
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
#include "maps.h"

#define ICMP_PORT_UNREACH  3
#define ICMP_ERROR_TTL	   64
#define ICMP_ERROR_TOS	   0xc0 /* IPTOS_PREC_INTERNETCONTROL, as the kernel's icmp_send */
#define ICMP_QUOTE_L4	   8	/* bytes of the offending L4 header quoted */
#define ICMP_QUOTE_MAX	   (60 + ICMP_QUOTE_L4)
#define ICMP_ERROR_HDR_LEN (sizeof(struct iphdr) + sizeof(struct icmp_echo_hdr))

/*
 * The ICMP port unreachable answers a CPU sends: ICMP_REJECT_RATE a second,
 * in bursts of up to ICMP_REJECT_BURST, as the kernel's own icmp_ratelimit
 * does for what it sends. A reject over the rate is dropped unanswered.
 */
#define ICMP_REJECT_RATE	 200
#define ICMP_REJECT_BURST	 100
#define ICMP_REJECT_NS_PER_TOKEN (1000000000ULL / ICMP_REJECT_RATE)

/*
 * icmp_quote is the packet an ICMP error quotes (RFC 792: its IPv4 header
 * and the first 8 bytes after it), read by icmp_quote_parse.
 */
struct icmp_quote {
	struct iphdr ip;
	__u32 ip_off;	 /* packet offset of the quoted IPv4 header */
	__u32 sport_off; /* packet offset of the quoted source port, or echo id */
	__u32 dport_off; /* packet offset of the quoted destination port, or echo id */
	__be16 sport;	 /* TCP/UDP source port; ICMP echo request: the id */
	__be16 dport;	 /* TCP/UDP destination port; ICMP echo request: 0 */
};

/* icmp_error is the new IPv4 packet: header, ICMP header, quote. */
struct icmp_error {
	struct iphdr ip;
	struct icmp_echo_hdr icmp; /* id and seq are the "unused" word, 0 */
	__u8 quote[ICMP_QUOTE_MAX];
};

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
	e->ip.check = ipv4_header_csum(&e->ip);
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
 * Returns 0, or a negative value with the packet in an undefined state
 * (drop it). Written with BPF_F_RECOMPUTE_CSUM so a CHECKSUM_COMPLETE skb
 * stays consistent. HAZARD: a CHECKSUM_PARTIAL skb (a pod's TCP or UDP) keeps
 * its csum_start/offset, now inside the quote; it is delivered straight into
 * the pod, whose stack takes it as verified and never completes it.
 * bpf_skb_change_tail and eth_set_macs invalidate every packet pointer.
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

/*
 * icmp_reject_allowed takes a token from this CPU's bucket: 1 when the
 * reject may be answered, 0 (and counted as suppressed) when the CPU is over
 * ICMP_REJECT_RATE. Per-CPU state, so plain stores and no locks. A
 * last_ns in the future (the clock never goes back) adds nothing.
 */
static __always_inline int icmp_reject_allowed(void)
{
	__u32 key = 0;
	struct icmp_rate *b = bpf_map_lookup_elem(&myelin_icmp_rate, &key);
	__u64 now = bpf_ktime_get_ns(), add;

	if (!b)
		return 0;
	if (now > b->last_ns) {
		add = (now - b->last_ns) / ICMP_REJECT_NS_PER_TOKEN;
		if (add >= ICMP_REJECT_BURST || b->tokens + add >= ICMP_REJECT_BURST) {
			b->tokens = ICMP_REJECT_BURST;
			b->last_ns = now;
		} else if (add) {
			b->tokens += add;
			b->last_ns += add * ICMP_REJECT_NS_PER_TOKEN;
		}
	}
	if (!b->tokens) {
		b->suppressed++;
		return 0;
	}
	b->tokens--;
	return 1;
}

/*
 * icmp_quote_ip reads the IPv4 header the ICMP message at info->l4_off
 * quotes into ip, and returns the offset of the quoted L4 header, or 0 for
 * a quote with no L4 header to read: cut short, not IPv4, a later fragment
 * (the caller checks the protocol).
 */
static __always_inline __u32 icmp_quote_ip(struct __sk_buff *skb, const struct ipv4_info *info,
					   struct iphdr *ip)
{
	__u32 off = info->l4_off + sizeof(struct icmp_echo_hdr);

	if (!info->l4_off || bpf_skb_load_bytes(skb, off, ip, sizeof(*ip)) < 0)
		return 0;
	if (ip->version != 4 || ip->ihl < 5 || (ip->frag_off & bpf_htons(IPV4_FRAG_OFFSET_MASK)))
		return 0;
	return off + ip->ihl * 4;
}

/*
 * icmp_quote_parse reads what the ICMP error at info->l4_off (destination
 * unreachable or time exceeded) quotes into q: a TCP or UDP header's ports,
 * or an ICMP echo request's id. Returns 0, or -1 for anything else: quoted
 * later fragments (no ports), other protocols, quotes cut short.
 */
static __always_inline int icmp_quote_parse(struct __sk_buff *skb, const struct ipv4_info *info,
					    struct icmp_quote *q)
{
	__be16 ports[2];
	__u32 off;

	q->ip_off = info->l4_off + sizeof(struct icmp_echo_hdr);
	off = icmp_quote_ip(skb, info, &q->ip);
	if (!off)
		return -1;
	if (q->ip.protocol == IPPROTO_TCP || q->ip.protocol == IPPROTO_UDP) {
		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0)
			return -1;
		q->sport = ports[0];
		q->dport = ports[1];
		q->sport_off = off;
		q->dport_off = off + sizeof(__be16);
		return 0;
	}
	if (q->ip.protocol == IPPROTO_ICMP) {
		struct icmp_echo_hdr ih;

		if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)) < 0 || ih.type != ICMP_ECHO)
			return -1;
		q->sport = ih.id;
		q->dport = 0;
		q->sport_off = off + ICMP_ID_OFF;
		q->dport_off = off + ICMP_ID_OFF;
		return 0;
	}
	return -1;
}

/*
 * icmp_quote_reply_key is the NAT key (NAT_DIR_INGRESS) of a reply to the
 * quoted packet: its tuple reversed. An ICMP error about a packet translated
 * on its way out finds that packet's flow by it.
 */
static __always_inline void icmp_quote_reply_key(struct nat_key *rev, const struct icmp_quote *q)
{
	rev->saddr = q->ip.daddr;
	rev->daddr = q->ip.saddr;
	rev->sport = q->dport;
	rev->dport = q->sport;
	rev->proto = q->ip.protocol;
	rev->dir = NAT_DIR_INGRESS;
	rev->pad = 0;
}

/*
 * icmp_quote_set_addr writes addr over the quoted address at field
 * (offsetof(struct iphdr, saddr) or daddr) and patches the quoted header's
 * checksum. The ICMP checksum needs nothing: the address and the checksum
 * of its own header change by opposite amounts and cancel in its sum. The
 * quoted TCP/UDP checksum is left as it was: it covers a whole packet the
 * error only quotes, and no stack checks it.
 */
static __always_inline int icmp_quote_set_addr(struct __sk_buff *skb, const struct icmp_quote *q,
					       __u32 field, __be32 old, __be32 addr)
{
	if (old == addr)
		return 0;
	if (bpf_skb_store_bytes(skb, q->ip_off + field, &addr, sizeof(addr), 0) < 0)
		return -1;
	return bpf_l3_csum_replace(skb, q->ip_off + offsetof(struct iphdr, check), old, addr,
				   sizeof(addr));
}

/*
 * icmp_error_redirect sends ICMP error info (l4: its ICMP header, quote q)
 * to addr as the quoted packet's sender: the error's destination and the
 * quote's source address and port become addr and port (an error about a
 * translated packet, back to who sent it before the translation). Checksums:
 * the outer IPv4 one for the address, the quoted one by icmp_quote_set_addr,
 * the ICMP one only for the port (l4 is the ICMP header's: no pseudo
 * header). Returns 0, or -1 when a rewrite failed.
 */
static __always_inline int icmp_error_redirect(struct __sk_buff *skb, struct ipv4_info *info,
					       const struct l4_info *l4, const struct icmp_quote *q,
					       __be32 addr, __be16 port)
{
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, addr) < 0 ||
	    icmp_quote_set_addr(skb, q, offsetof(struct iphdr, saddr), q->ip.saddr, addr) < 0 ||
	    l4_rewrite_port(skb, l4, q->sport_off, q->sport, port) < 0)
		return -1;
	info->daddr = addr;
	return 0;
}

#endif /* MYELIN_LIB_ICMP_H */
