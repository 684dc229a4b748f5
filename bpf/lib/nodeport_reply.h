/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NodePort SNAT, the way back (lib/nodeport.h has the flows): a backend's
 * reply to node_ip and a NAT port gets the NodePort as its source and the
 * client as its destination (np_reply), recording on an embryonic flow that
 * the backend answered; an ICMP error about a client's packet, from the
 * backend or a router on the way, goes back to the client as an error about
 * what it sent (np_icmp_error).
 */
#ifndef MYELIN_LIB_NODEPORT_REPLY_H
#define MYELIN_LIB_NODEPORT_REPLY_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "icmp.h"
#include "l4.h"
#include "maps.h"
#include "nat.h"
#include "nodeport.h"
#include "reasons.h"

/* A SYN-ACK may acknowledge a TCP Fast Open SYN's data too: this much past its number. */
#define NP_SYN_DATA_MAX 0xffffU

/*
 * np_reply_seen records on an embryonic flow's forward entry that the
 * backend answered (the reply's reverse entry rv has key rev): the first TCP
 * SYN-ACK that acknowledges the client's SYN (the forward entry's number,
 * np_client_isn, 0 for none; up to NP_SYN_DATA_MAX more for a SYN's data),
 * with its own sequence number + 1, which the client's ACK must acknowledge;
 * or any UDP reply. First wins: a forger who sends the SYN itself, and so
 * knows its number, must still beat the backend's own answer (one
 * in-cluster round trip) with a spray over the NAT ports; one who can't see
 * the client's SYN guesses one in 65,536 per SYN-ACK. Two answers take the
 * number away, so that no SYN-ACK counts unraced after them: an RST
 * acknowledging the SYN the same way (the backend refused it: a closed
 * port), and any ACK without SYN or RST (the backend still holds a
 * connection on the tuple, half-open or in TIME_WAIT, from a flow whose NAT
 * port this one got, and answered the SYN with an ACK of its old numbers; a
 * forger who sends one instead must hit the port within the backend's
 * round trip). Other RSTs and FINs change nothing.
 */
static __always_inline void np_reply_seen(struct __sk_buff *skb, const struct ipv4_info *info,
					  const struct nat_key *rev, struct np_entry *rv)
{
	struct l4_head h = {};
	struct nat_key fwd;
	struct np_entry *e;
	__u8 f = 0;

	if (info->proto == IPPROTO_TCP) {
		if (l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0)
			return;
		f = h.flags & (TCP_FLAGS_SYN | TCP_FLAGS_ACK | TCP_FLAGS_FIN | TCP_FLAGS_RST);
		if (f == (TCP_FLAGS_FIN | TCP_FLAGS_ACK))
			f = TCP_FLAGS_ACK;
		if (f != (TCP_FLAGS_SYN | TCP_FLAGS_ACK) && f != (TCP_FLAGS_RST | TCP_FLAGS_ACK) &&
		    f != TCP_FLAGS_ACK)
			return;
	}
	np_pair_key(&fwd, rev, rv, NAT_DIR_EGRESS);
	e = bpf_map_lookup_elem(&myelin_nodeport_syn, &fwd);
	if (!np_fwd_ours(e, rev))
		return;
	if (info->proto == IPPROTO_TCP) {
		if ((e->flags & NAT_F_REPLIED) || !e->reply_seq)
			return;
		/* An old connection's ACK acknowledges that one's numbers. */
		if (f != TCP_FLAGS_ACK && bpf_ntohl(h.ack) - e->reply_seq > NP_SYN_DATA_MAX)
			return;
		if (f != (TCP_FLAGS_SYN | TCP_FLAGS_ACK)) {
			e->reply_seq = 0; /* refused (RST), or answered by an old connection */
			return;
		}
		e->reply_seq = bpf_ntohl(h.seq) + 1;
	}
	e->flags |= NAT_F_REPLIED;
	rv->flags |= NAT_F_REPLIED;
}

/*
 * np_reply_lookup finds the reverse entry of a backend's reply (key rev)
 * and records the reply. Only packets to a port of the NAT range get here.
 */
static __always_inline struct np_entry *np_reply_lookup(struct __sk_buff *skb,
							const struct ipv4_info *info,
							const struct l4_info *l4,
							const struct nat_key *rev)
{
	__u16 flags = l4->tcp_closing ? NAT_F_CLOSING : 0;
	struct np_entry *e = NULL;
	struct nat_key fwd;

	if (rev->proto == IPPROTO_UDP) {
		e = bpf_map_lookup_elem(&myelin_nodeport_udp, rev);
		/* An answered UDP flow: when the reply refreshes it (once a second),
		 * the forward entry is looked up too, so the LRU sees the flow used
		 * at both ends (a flow whose backend talks more than its client
		 * keeps its forward entry). */
		if (e) {
			if (np_touch(e, NAT_F_REPLIED | flags)) {
				np_pair_key(&fwd, rev, e, NAT_DIR_EGRESS);
				bpf_map_lookup_elem(&myelin_nodeport_udp, &fwd);
			}
			return e;
		}
	}
	e = bpf_map_lookup_elem(&myelin_nodeport_nat, rev);
	if (e) {
		np_touch(e, NAT_F_REPLIED | flags);
		return e;
	}
	e = bpf_map_lookup_elem(&myelin_nodeport_syn, rev);
	if (e) {
		np_touch(e, flags);
		if (!(e->flags & NAT_F_REPLIED))
			np_reply_seen(skb, info, rev, e);
		return e;
	}
	/* A pod answering a flow we no longer know: evicted before its handshake. */
	if (cluster_contains(info->saddr))
		np_count(NP_STAT_REPLY_LOST);
	return NULL;
}

/*
 * np_reply translates a backend's reply to a NodePort SNAT flow (to
 * node_ip and a NAT port) back: source to node_ip:nodePort, destination to
 * the client. Returns 0 when translated, 1 when the packet is not such a
 * reply, or a DROP_* reason. Packets to ports outside the NAT range cost no
 * lookup.
 */
static __always_inline int np_reply(struct __sk_buff *skb, struct ipv4_info *info,
				    struct l4_info *l4)
{
	struct nat_key rev;
	const struct np_entry *e;
	__u16 dport = bpf_ntohs(l4->dport);
	__be32 client;
	__be16 cport, front;

	nat_key_of(&rev, info, l4, NAT_DIR_INGRESS);
	if (dport < nat_port_min || dport > nat_port_max)
		return 1;
	e = np_reply_lookup(skb, info, l4, &rev);
	if (!e)
		return 1;
	client = e->addr;
	cport = e->port;
	front = e->xport;
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, client) < 0 ||
	    l4_rewrite_port(skb, l4, l4->rport_off, l4->dport, cport) < 0 ||
	    l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, node_ip) < 0 ||
	    l4_rewrite_port(skb, l4, l4->port_off, l4->sport, front) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = client;
	info->saddr = node_ip;
	l4->dport = cport;
	l4->sport = front;
	return 0;
}

/*
 * np_flow_of_reply finds the NodePort SNAT flow a packet with the reply
 * tuple rev would be a reply of, as np_reply_lookup does (answered UDP,
 * established, then embryonic) but without recording anything: an ICMP
 * error is no reply, and must neither refresh nor help promote a flow.
 */
static __always_inline const struct np_entry *np_flow_of_reply(const struct nat_key *rev)
{
	const struct np_entry *e = NULL;

	if (rev->proto == IPPROTO_UDP)
		e = bpf_map_lookup_elem(&myelin_nodeport_udp, rev);
	if (!e)
		e = bpf_map_lookup_elem(&myelin_nodeport_nat, rev);
	if (e)
		return e;
	return bpf_map_lookup_elem(&myelin_nodeport_syn, rev);
}

/*
 * np_icmp_quote_xlate rewrites the quote q of an ICMP error about a client's
 * packet of flow e (node_ip:natport -> backend) into what the client sent
 * (client:cport -> node_ip:nodePort). icmp_quote_set_addr keeps the quoted
 * IPv4 checksum right (the ICMP checksum needs nothing for it); the ports
 * patch the ICMP checksum (l4 is the error's ICMP header).
 */
static __always_inline int np_icmp_quote_xlate(struct __sk_buff *skb, const struct l4_info *l4,
					       const struct icmp_quote *q, const struct np_entry *e)
{
	if (icmp_quote_set_addr(skb, q, offsetof(struct iphdr, saddr), q->ip.saddr, e->addr) < 0 ||
	    l4_rewrite_port(skb, l4, q->sport_off, q->sport, e->port) < 0 ||
	    icmp_quote_set_addr(skb, q, offsetof(struct iphdr, daddr), q->ip.daddr, node_ip) < 0 ||
	    l4_rewrite_port(skb, l4, q->dport_off, q->dport, e->xport) < 0)
		return -1;
	return 0;
}

/*
 * np_icmp_error translates an ICMP error to node_ip (destination
 * unreachable, fragmentation needed included, or time exceeded) about a
 * client's packet of a NodePort SNAT flow, which it quotes as the backend
 * was to get it (node_ip:natport -> backend), back to what the client
 * expects: the destination becomes the client, the quote client:cport ->
 * node_ip:nodePort; an error from the backend itself comes from node_ip
 * (the NodePort frontend), one from a router keeps the router's address.
 * Without it the client never learns the path MTU or that the backend's
 * port is closed. Returns 0 when translated (send it on as np_reply's
 * replies), 1 when the packet is no such error, or a DROP_* reason. Only
 * quotes from a port of the NAT range cost lookups.
 */
static __always_inline int np_icmp_error(struct __sk_buff *skb, struct ipv4_info *info)
{
	struct icmp_quote q = {};
	struct l4_info l4 = {};
	const struct np_entry *e;
	struct np_entry flow;
	__u16 qport;

	if (l4_parse(skb, info, &l4) < 0 ||
	    (l4.icmp_type != ICMP_DEST_UNREACH && l4.icmp_type != ICMP_TIME_EXCEEDED))
		return 1;
	/* A pod is no router: an error from a pod address is the quoted
	 * destination's own (the backend's) or forged, and relayed off the node
	 * it would carry a pod's data where its egress policy does not allow. */
	if (icmp_quote_parse(skb, info, &q) < 0 || q.ip.saddr != node_ip ||
	    (q.ip.protocol != IPPROTO_TCP && q.ip.protocol != IPPROTO_UDP) ||
	    (cluster_contains(info->saddr) && info->saddr != q.ip.daddr))
		return 1;
	qport = bpf_ntohs(q.sport);
	if (qport < nat_port_min || qport > nat_port_max)
		return 1;

	struct nat_key rev;

	icmp_quote_reply_key(&rev, &q);

	e = np_flow_of_reply(&rev);
	if (!e)
		return 1;
	flow = *e;
	/* Helper copies only: nothing here holds a packet pointer. */
	if (info->saddr == q.ip.daddr) {
		if (l4_rewrite_addr(skb, &l4, IPV4_SADDR_OFF, info->saddr, node_ip) < 0)
			return DROP_INVALID_PACKET;
		info->saddr = node_ip;
	}
	if (l4_rewrite_addr(skb, &l4, IPV4_DADDR_OFF, info->daddr, flow.addr) < 0 ||
	    np_icmp_quote_xlate(skb, &l4, &q, &flow) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = flow.addr;
	return 0;
}

#endif /* MYELIN_LIB_NODEPORT_REPLY_H */
