/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What NetworkPolicy reads of a packet (lib/policy.h): its tuple, and for
 * TCP the flags, acknowledgment number and FIN coverage the close tracking
 * of lib/policy_ct.h needs, in one load from the linear data when it can.
 */
#ifndef MYELIN_LIB_POLICY_L4_H
#define MYELIN_LIB_POLICY_L4_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ipv4.h"
#include "l4.h"

#define POLICY_TCP_FIN		0x01 /* the TCP flags byte's FIN bit */
#define POLICY_TCP_RST		0x04 /* the TCP flags byte's RST bit */
#define POLICY_IPV4_TOT_LEN_OFF (ETH_HLEN + 2)

/* policy_tuple is a packet's tuple as policy sees it (network order). */
struct policy_tuple {
	__u32 saddr;
	__u32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 syn;	  /* a TCP SYN without ACK: a new connection, never tracked-path */
	__u8 flags;	  /* the local pod's enum policy_flags */
	__u8 tcp_flags;	  /* TCP: the header's flags byte; 0 for other protocols */
	__u8 vouched;	  /* ingress: BPF delivers it from a pod whose source a node checked
			     (endpoint_vouched) */
	__u8 related;	  /* egress: an ICMP error about a connection tracked for the pod, as
			     the pod sent it (policy_egress_begin) */
	__u32 in_ifindex; /* ingress, what the stack delivers: the device it entered the
			     node on (0: built by the node; policy_ct_sender_checked) */
	__u32 ack;	  /* TCP: the acknowledgment number (host order) */
	__u32 fin_end;	  /* TCP FIN: the acknowledgment number that covers it (host order) */
};

/*
 * policy_fin_end is the acknowledgment number that covers the FIN of TCP
 * header h: its sequence number plus its payload (by the IPv4 total length,
 * not the frame, which may be padded; by the frame for a BIG TCP packet,
 * whose total length is 0) plus one for the FIN.
 */
static __always_inline __u32 policy_fin_end(struct __sk_buff *skb, const struct ipv4_info *info,
					    const struct l4_head *h)
{
	__be16 tot_len = 0;
	__u32 payload, len;

	bpf_skb_load_bytes(skb, POLICY_IPV4_TOT_LEN_OFF, &tot_len, sizeof(tot_len));
	len = bpf_ntohs(tot_len);
	if (len == 0 && skb->gso_size) /* a BIG TCP packet over 64 KiB, as ipv4_parse */
		len = skb->len - ETH_HLEN;
	payload = len - (info->l4_off - ETH_HLEN) - (h->doff >> 4) * 4;
	return bpf_ntohl(h->seq) + payload + 1;
}

/*
 * policy_l4 reads the ports of TCP, UDP and SCTP and whether a TCP packet
 * is a SYN without ACK (opens a connection), in one load, with the TCP
 * flags and acknowledgment number the close tracking needs (and, for a FIN,
 * the acknowledgment number that covers it); other protocols and later
 * fragments have 0 ports.
 */
static __always_inline void policy_l4(struct __sk_buff *skb, const struct ipv4_info *info,
				      struct policy_tuple *t)
{
	struct l4_head h = {};

	if (!info->l4_off)
		return;
	if (info->proto == IPPROTO_TCP) {
		if (l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0)
			return;
		t->syn = (h.flags & (TCP_FLAGS_SYN | TCP_FLAGS_ACK)) == TCP_FLAGS_SYN;
		t->tcp_flags = h.flags;
		t->ack = bpf_ntohl(h.ack);
		if (h.flags & POLICY_TCP_FIN)
			t->fin_end = policy_fin_end(skb, info, &h);
	} else if (info->proto == IPPROTO_UDP || info->proto == IPPROTO_SCTP) {
		if (l4_load_head(skb, info, &h, 4) < 0)
			return;
	}
	t->sport = h.sport;
	t->dport = h.dport;
}

#endif /* MYELIN_LIB_POLICY_L4_H */
