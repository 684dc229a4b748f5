/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * L4 header access for address translation: the ports of TCP and UDP, the
 * type and id of ICMP, and rewrites of addresses and ports that keep the IPv4
 * and L4 checksums right. Reads copy a header out of the packet's linear
 * data into the caller's struct (l4_linear; bpf_skb_load_bytes only when the
 * header is not all there), so no packet pointer outlives a read; writes go
 * through bpf_skb_store_bytes and the checksum helpers (which invalidate
 * every packet pointer). The L4 offset depends on the IPv4 options.
 */
#ifndef MYELIN_LIB_L4_H
#define MYELIN_LIB_L4_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>

#include "ipv4.h"

/*
 * ICMP: <linux/icmp.h> pulls in glibc's socket headers, which do not build
 * for -target bpf, so the few bits used are spelled out here (RFC 792).
 */
#define ICMP_ECHOREPLY	   0
#define ICMP_DEST_UNREACH  3
#define ICMP_ECHO	   8
#define ICMP_TIME_EXCEEDED 11

/* icmp_echo_hdr is the ICMP header; id and seq mean something only for echo. */
struct icmp_echo_hdr {
	__u8 type;
	__u8 code;
	__be16 checksum;
	__be16 id;
	__be16 seq;
};

/* The TCP header's flags byte (CWR..FIN) and four of its bits. */
#define TCP_FLAGS_OFF 13
#define TCP_FLAGS_FIN 0x01
#define TCP_FLAGS_SYN 0x02
#define TCP_FLAGS_RST 0x04
#define TCP_FLAGS_ACK 0x10

#define IPV4_SADDR_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IPV4_DADDR_OFF (ETH_HLEN + offsetof(struct iphdr, daddr))
#define ICMP_ID_OFF    offsetof(struct icmp_echo_hdr, id)

/* l4_info holds the L4 fields address translation works with. */
struct l4_info {
	__u64 csum_flags; /* extra flags for bpf_l4_csum_replace */
	__be16 sport;	  /* TCP/UDP source port; ICMP echo request: the id */
	__be16 dport;	  /* TCP/UDP destination port; ICMP echo reply: the id */
	__u16 csum_off;	  /* packet offset of the L4 checksum */
	__u16 port_off;	  /* packet offset of the source port, or the ICMP echo id */
	__u16 rport_off;  /* packet offset of the destination port, or the ICMP echo id */
	__u8 icmp_type;	  /* ICMP only */
	__u8 tcp_closing; /* TCP FIN or RST */
	__u8 tcp_opening; /* TCP SYN without ACK: a connection's first segment */
	__u8 tcp_syn;	  /* TCP SYN, with or without ACK */
	__u8 pseudo_hdr;  /* the L4 checksum covers the IPv4 addresses (TCP, UDP) */
};

/* l4_head is the start of a TCP header up to its flags (UDP and SCTP: the ports). */
struct l4_head {
	__be16 sport;
	__be16 dport;
	__be32 seq;
	__be32 ack;
	__u8 doff; /* data offset in 4-byte words, upper nibble */
	__u8 flags;
};

#define L4_TCP_HEAD_LOAD (TCP_FLAGS_OFF + 1) /* bytes of l4_head a TCP packet loads */
#define L4_OFF_MAX	 (ETH_HLEN + 60)     /* the farthest an L4 header starts (IHL 15) */

/*
 * l4_linear returns the n bytes at packet offset off (an L4 header's start)
 * when they all lie in the packet's linear data, else NULL. n must be a
 * constant. The pointer is good until the next helper call that may change
 * the packet: callers copy what they need at once.
 */
static __always_inline const void *l4_linear(struct __sk_buff *skb, __u32 off, __u32 n)
{
	/* Fresh (volatile) reads: reusing an earlier load of skb->data, clang may
	 * zero-extend it with a 32-bit move, after which the verifier sees a
	 * number instead of a packet pointer (it did after a decapsulation). */
	void *data_end = (void *)(long)*(volatile __u32 *)&skb->data_end;
	__u8 *p;

	if (off > L4_OFF_MAX)
		return NULL;
	p = (void *)(long)*(volatile __u32 *)&skb->data + off;
	if ((void *)(p + n) > data_end)
		return NULL;
	return p;
}

/*
 * l4_load_head copies the first n bytes of the L4 header at info->l4_off
 * into h: straight from the packet when they lie in its linear data (the
 * usual case: no helper call), else through bpf_skb_load_bytes. Returns 0,
 * or a negative value when the packet is too short.
 */
static __always_inline int l4_load_head(struct __sk_buff *skb, const struct ipv4_info *info,
					struct l4_head *h, __u32 n)
{
	const struct l4_head *ph = l4_linear(skb, info->l4_off, L4_TCP_HEAD_LOAD);

	if (!ph)
		return bpf_skb_load_bytes(skb, info->l4_off, h, n);
	h->sport = ph->sport;
	h->dport = ph->dport;
	h->seq = ph->seq;
	h->ack = ph->ack;
	h->doff = ph->doff;
	h->flags = ph->flags;
	return 0;
}

/*
 * l4_parse reads the TCP, UDP or ICMP header at info->l4_off into l4, from
 * the linear data when the whole header (20, 8 or 8 bytes) is there.
 * Returns 0, or -1 for other protocols, later fragments and headers cut
 * short. ICMP echo fills the id in sport (request) or dport (reply); other
 * ICMP types leave both 0.
 */
static __always_inline int l4_parse(struct __sk_buff *skb, const struct ipv4_info *info,
				    struct l4_info *l4)
{
	__u32 off = info->l4_off;

	if (!off)
		return -1;
	switch (info->proto) {
	case IPPROTO_TCP: {
		const struct tcphdr *p = l4_linear(skb, off, sizeof(*p));
		struct tcphdr th;

		if (p)
			th = *p;
		else if (bpf_skb_load_bytes(skb, off, &th, sizeof(th)) < 0)
			return -1;
		l4->sport = th.source;
		l4->dport = th.dest;
		l4->tcp_closing = th.fin || th.rst;
		l4->tcp_opening = th.syn && !th.ack;
		l4->tcp_syn = th.syn;
		l4->csum_off = off + offsetof(struct tcphdr, check);
		l4->port_off = off + offsetof(struct tcphdr, source);
		l4->rport_off = off + offsetof(struct tcphdr, dest);
		l4->pseudo_hdr = 1;
		return 0;
	}
	case IPPROTO_UDP: {
		const struct udphdr *p = l4_linear(skb, off, sizeof(*p));
		struct udphdr uh;

		if (p)
			uh = *p;
		else if (bpf_skb_load_bytes(skb, off, &uh, sizeof(uh)) < 0)
			return -1;
		l4->sport = uh.source;
		l4->dport = uh.dest;
		l4->csum_off = off + offsetof(struct udphdr, check);
		l4->port_off = off + offsetof(struct udphdr, source);
		l4->rport_off = off + offsetof(struct udphdr, dest);
		l4->pseudo_hdr = 1;
		/* A zero UDP checksum means "none" and must stay zero. */
		l4->csum_flags = BPF_F_MARK_MANGLED_0;
		return 0;
	}
	case IPPROTO_ICMP: {
		const struct icmp_echo_hdr *p = l4_linear(skb, off, sizeof(*p));
		struct icmp_echo_hdr ih;

		if (p)
			ih = *p;
		else if (bpf_skb_load_bytes(skb, off, &ih, sizeof(ih)) < 0)
			return -1;
		l4->icmp_type = ih.type;
		if (ih.type == ICMP_ECHO)
			l4->sport = ih.id;
		else if (ih.type == ICMP_ECHOREPLY)
			l4->dport = ih.id;
		l4->csum_off = off + offsetof(struct icmp_echo_hdr, checksum);
		l4->port_off = off + ICMP_ID_OFF;
		l4->rport_off = off + ICMP_ID_OFF;
		return 0;
	}
	}
	return -1;
}

/*
 * l4_rewrite_addr writes addr (4 bytes at off: an IPv4 source or destination)
 * and patches the IPv4 header checksum and, when the L4 checksum covers the
 * pseudo header (TCP, UDP), the L4 checksum. Returns 0 or a negative error.
 */
static __always_inline int l4_rewrite_addr(struct __sk_buff *skb, const struct l4_info *l4,
					   __u32 off, __be32 old, __be32 addr)
{
	if (bpf_skb_store_bytes(skb, off, &addr, sizeof(addr), 0) < 0)
		return -1;
	if (bpf_l3_csum_replace(skb, IPV4_CSUM_OFF, old, addr, sizeof(addr)) < 0)
		return -1;
	if (!l4->pseudo_hdr)
		return 0;
	return bpf_l4_csum_replace(skb, l4->csum_off, old, addr,
				   BPF_F_PSEUDO_HDR | l4->csum_flags | sizeof(addr));
}

/*
 * l4_rewrite_port writes port (2 bytes at off, inside the L4 message whose
 * checksum is at l4->csum_off) and patches that checksum. No-op when unchanged.
 */
static __always_inline int l4_rewrite_port(struct __sk_buff *skb, const struct l4_info *l4,
					   __u32 off, __be16 old, __be16 port)
{
	if (old == port)
		return 0;
	if (bpf_skb_store_bytes(skb, off, &port, sizeof(port), 0) < 0)
		return -1;
	return bpf_l4_csum_replace(skb, l4->csum_off, old, port, l4->csum_flags | sizeof(port));
}

#endif /* MYELIN_LIB_L4_H */
