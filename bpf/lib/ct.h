/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service conntrack, myelin_lb_ct (flows pods open) and
 * myelin_lb_ct_nodeport (NodePort flows from outside): a load-balanced
 * flow's forward entry (client -> frontend: which backend) keeps every packet
 * of the flow on one backend, and its reverse entry (backend -> client)
 * turns replies back into packets from the frontend (ct_reply_xlate). Only
 * TCP and UDP are tracked. Entries carry last_seen and the TCP state; the
 * agent's GC (Datapath.GCServiceCT) removes flows idle past their state's
 * timeout.
 */
#ifndef MYELIN_LIB_CT_H
#define MYELIN_LIB_CT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "clock.h"
#include "config.h"
#include "frag.h"
#include "icmp.h"
#include "ipv4.h"
#include "l4.h"
#include "lb.h"
#include "maps.h"
#include "reasons.h"

/*
 * LB_HAIRPIN_ADDR (169.254.42.1) is the source of a pod's packet to a
 * service whose chosen backend is the pod itself: its own address as the
 * source would make the pod drop the packet. The pod answers it through its
 * default route via 169.254.1.1, i.e. back into myelin_from_pod.
 */
#define LB_HAIRPIN_ADDR bpf_htonl(0xa9fe2a01)

/* ct_l4_parse is l4_parse for the tracked protocols, TCP and UDP: -1 for the rest. */
static __always_inline int ct_l4_parse(struct __sk_buff *skb, const struct ipv4_info *info,
				       struct l4_info *l4)
{
	if (info->proto != IPPROTO_TCP && info->proto != IPPROTO_UDP)
		return -1;
	return l4_parse(skb, info, l4);
}

/* ct_key_of is the key of a packet's tuple (info, l4) in direction dir. */
static __always_inline void ct_key_of(struct ct_key *key, const struct ipv4_info *info,
				      const struct l4_info *l4, __u8 dir)
{
	key->saddr = info->saddr;
	key->daddr = info->daddr;
	key->sport = l4->sport;
	key->dport = l4->dport;
	key->proto = info->proto;
	key->dir = dir;
	key->pad = 0;
}

#define CT_REFRESH_NS 1000000000ULL /* last_seen is rewritten at most once a second */

/* ct_lookup returns the entry of key in map (myelin_lb_ct or myelin_lb_ct_nodeport), or NULL. */
static __always_inline struct ct_entry *ct_lookup(void *map, const struct ct_key *key)
{
	return bpf_map_lookup_elem(map, key);
}

/*
 * ct_reverse_of fills the reverse entry of the flow whose forward entry is
 * fwd -> fv: replies leave backend fv->be_addr:be_port towards the client
 * (or LB_HAIRPIN_ADDR) and its port, and become packets from the frontend.
 * rev and rv must be zeroed.
 */
static __always_inline void ct_reverse_of(const struct ct_key *fwd, const struct ct_entry *fv,
					  struct ct_key *rev, struct ct_entry *rv)
{
	rev->saddr = fv->be_addr;
	rev->daddr = (fv->flags & CT_F_HAIRPIN) ? LB_HAIRPIN_ADDR : fwd->saddr;
	rev->sport = fv->be_port;
	rev->dport = fwd->sport;
	rev->proto = fwd->proto;
	rev->dir = CT_DIR_REVERSE;
	rv->front_addr = fwd->daddr;
	rv->client_addr = fwd->saddr;
	rv->front_port = fwd->dport;
	rv->flags = fv->flags & (CT_F_HAIRPIN | CT_F_NODEPORT);
	rv->last_seen = fv->last_seen;
}

/*
 * ct_create records a new flow in map: fwd (the client's tuple to the
 * frontend) -> fv (its backend). The reverse entry goes first, so no reply
 * can beat it. Returns 0, or DROP_SVC_CT_FULL when the map is full: the
 * packet is dropped rather than sent on with replies that could not be
 * translated back, and no half of a flow is left behind.
 */
static __always_inline int ct_create(void *map, const struct ct_key *fwd, const struct ct_entry *fv,
				     __u32 syn_next)
{
	struct ct_key rev = {};
	struct ct_entry rv = {};

	ct_reverse_of(fwd, fv, &rev, &rv);
	if (syn_next) {
		/* A flow still awaiting its backend keeps the first SYN's number: a
		 * later SYN of a lower one on the same tuple would make the half-open
		 * backend's ACK of the first look like an ACK of client data. */
		const struct ct_entry *old = bpf_map_lookup_elem(map, &rev);

		if (old && (old->flags & CT_F_AWAITING_REPLY) && !(old->flags & CT_F_CLOSING))
			syn_next = old->index;
		rv.flags |= CT_F_AWAITING_REPLY;
		rv.index = syn_next;
	}
	if (bpf_map_update_elem(map, &rev, &rv, BPF_ANY) < 0)
		return DROP_SVC_CT_FULL;
	if (bpf_map_update_elem(map, fwd, fv, BPF_ANY) < 0) {
		bpf_map_delete_elem(map, &rev);
		return DROP_SVC_CT_FULL;
	}
	return 0;
}

/* ct_state_of is the state a TCP segment (l4) shows: CT_F_CLOSING, CT_F_ESTABLISHED or 0. */
static __always_inline __u16 ct_state_of(__u8 proto, const struct l4_info *l4, __u16 established)
{
	if (proto != IPPROTO_TCP)
		return 0;
	if (l4->tcp_closing)
		return CT_F_CLOSING;
	return l4->tcp_opening ? 0 : established;
}

/*
 * ct_touch records a packet of the flow of e: the state it shows, and
 * last_seen when a second old. Plain stores: a concurrent packet on another
 * CPU may win, which loses at most a second of age or a flag the next
 * packet sets again. Returns whether last_seen was refreshed.
 */
static __always_inline int ct_touch(struct ct_entry *e, __u16 state)
{
	__u64 now = clock_coarse_ns();

	if ((e->flags & state) != state)
		e->flags |= state;
	if (now - e->last_seen <= CT_REFRESH_NS)
		return 0;
	e->last_seen = now;
	return 1;
}

/*
 * ct_touch_forward is ct_touch for a packet of an existing flow fwd -> e in
 * map. Once a second, with last_seen, it also checks that the flow's
 * reverse entry is still there and writes it again if not (one more lookup
 * per flow and second, none per packet): a reverse entry lost to a GC race
 * or a direct connection that reused the flow's ports and has since gone
 * would otherwise let replies pass untranslated. A closing flow is left
 * alone: its ports may already belong to a new connection.
 */
static __always_inline void ct_touch_forward(void *map, const struct ct_key *fwd,
					     struct ct_entry *e, const struct l4_info *l4)
{
	struct ct_key rev = {};
	struct ct_entry rv = {};

	if (!ct_touch(e, ct_state_of(fwd->proto, l4, CT_F_ESTABLISHED)) ||
	    (e->flags & CT_F_CLOSING))
		return;
	ct_reverse_of(fwd, e, &rev, &rv);
	if (!bpf_map_lookup_elem(map, &rev))
		bpf_map_update_elem(map, &rev, &rv, BPF_NOEXIST);
}

/*
 * ct_from_backend_port: port (network order) may be a Service backend's, so
 * a packet from it may be the reply of a Service flow (myelin_lb_ports).
 */
static __always_inline int ct_from_backend_port(__be16 port)
{
	return lb_port_marked(&myelin_lb_ports, port);
}

/*
 * ct_forget_stale_reply runs on a pod's packet to another pod (no service in
 * the way). A TCP SYN there opens a new connection, so a reverse entry for
 * its reply tuple can only be left over from an earlier service flow that
 * used the same ports: clients reuse an ephemeral port once the connection
 * that held it towards another destination (the frontend) is gone. Left in
 * place it would turn this connection's replies into packets from the
 * frontend, which the client's socket refuses. The common case costs one
 * read of the header's start, straight from the linear data (l4_load_head:
 * a helper call each for the flags and the ports cost ~20 ns a packet more,
 * BenchmarkProgramRun); a SYN pays a bit test (a reverse entry's
 * source port is its backend's, marked in myelin_lb_ports before the
 * backend is written), a SYN to a port some backend uses a lookup, and a
 * map delete only when there is such an entry: a delete takes the bucket's
 * lock with interrupts off and dirties its cache line even for a key that
 * is not there, a lookup only reads. The lookup is what the bit spares a
 * pod's connection to anything but a backend port: a miss in the large
 * conntrack table costs a cache and TLB miss, ~240 ns per SYN measured
 * (BenchmarkConnection, docs/performance.md).
 * UDP has no connection start to key on, so a direct UDP flow reusing an
 * earlier service flow's ports keeps the translation until the GC collects
 * the service flow (the UDP timeout after its last packet).
 */
static __always_inline void ct_forget_stale_reply(struct __sk_buff *skb,
						  const struct ipv4_info *info)
{
	struct l4_head h = {};
	struct ct_key rev = {.saddr = info->daddr,
			     .daddr = info->saddr,
			     .proto = IPPROTO_TCP,
			     .dir = CT_DIR_REVERSE};

	if (info->proto != IPPROTO_TCP || !info->l4_off)
		return;
	if (l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0)
		return;
	if ((h.flags & (TCP_FLAGS_SYN | TCP_FLAGS_ACK)) != TCP_FLAGS_SYN)
		return;
	if (!ct_from_backend_port(h.dport))
		return;
	rev.sport = h.dport;
	rev.dport = h.sport;
	if (bpf_map_lookup_elem(&myelin_lb_ct, &rev))
		bpf_map_delete_elem(&myelin_lb_ct, &rev);
}

/*
 * ct_syn_next is what CT_F_AWAITING_REPLY keeps of a new TCP flow whose first
 * packet is info: the client's sequence number + 1 (never 0: 0 is "no
 * awaiting"); 0 for another protocol or a header that can't be read.
 */
static __always_inline __u32 ct_syn_next(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct l4_head h = {};
	__u32 next;

	if (info->proto != IPPROTO_TCP ||
	    l4_load_head(skb, info, &h, offsetof(struct l4_head, ack)) < 0)
		return 0;
	next = bpf_ntohl(h.seq) + 1;
	return next ? next : 1;
}

/*
 * ct_backend_answered says whether a backend's TCP segment (no SYN, FIN or
 * RST) of a flow awaiting its answer shows a completed handshake: it carries
 * data, or acknowledges client data past its SYN (next: the client's ISN + 1).
 * A half-open backend does neither: it answers a blind client's out-of-window
 * segment with an ACK of exactly next. Two loads, only for such segments.
 */
static __always_inline int ct_backend_answered(struct __sk_buff *skb, const struct ipv4_info *info,
					       __u32 next)
{
	struct l4_head h = {};
	__be16 tot;

	if (l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tot_len), &tot, sizeof(tot)) <
		    0)
		return 0;
	if ((h.flags & TCP_FLAGS_ACK) && (__s32)(bpf_ntohl(h.ack) - next) > 0)
		return 1;
	/* tot_len 0: a BIG TCP packet, past 64 KiB of data. */
	return !tot || bpf_ntohs(tot) > info->l4_off - ETH_HLEN + (h.doff >> 4) * 4;
}

/*
 * ct_reply_apply translates a reply of the load-balanced flow whose reverse
 * entry is e back: source to the frontend's address and port, and for a
 * hairpin flow the destination back to the client. Returns 0 with the
 * entry's flags in *flags, or a DROP_* reason. info carries the new
 * addresses.
 */
static __always_inline int ct_reply_apply(struct ct_entry *e, struct __sk_buff *skb,
					  struct ipv4_info *info, struct l4_info *l4, __u16 *flags,
					  int from_backend)
{
	__be32 front, client;
	__be16 port;

	ct_touch(e, ct_state_of(info->proto, l4, 0));
	/* The backend answered past the handshake: the flow may be established.
	 * Only where the backend's own segments pass (from_backend: a pod's veth,
	 * the node's stack), never what arrives on a device from anywhere. */
	if ((e->flags & CT_F_AWAITING_REPLY) && from_backend && !l4->tcp_syn && !l4->tcp_closing &&
	    ct_backend_answered(skb, info, e->index))
		e->flags &= ~CT_F_AWAITING_REPLY;
	front = e->front_addr;
	port = e->front_port;
	client = e->client_addr;
	*flags = e->flags;
	/* Helper copies only: nothing here holds a packet pointer. */
	if (l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, front) < 0 ||
	    l4_rewrite_port(skb, l4, l4->port_off, l4->sport, port) < 0)
		return DROP_INVALID_PACKET;
	info->saddr = front;
	l4->sport = port;
	if (!(*flags & CT_F_HAIRPIN))
		return 0;
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, client) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = client;
	return 0;
}

/*
 * ct_reply_xlate is ct_reply_apply for a packet whose tuple has a reverse
 * entry in map. Returns 0 with the entry's flags in *flags (0: not a reply,
 * untouched), or a DROP_* reason.
 */
static __always_inline int ct_reply_xlate(void *map, struct __sk_buff *skb, struct ipv4_info *info,
					  struct l4_info *l4, __u16 *flags, int from_backend)
{
	struct ct_key key;
	struct ct_entry *e;

	ct_key_of(&key, info, l4, CT_DIR_REVERSE);
	e = ct_lookup(map, &key);
	if (!e)
		return 0;
	return ct_reply_apply(e, skb, info, l4, flags, from_backend);
}

/*
 * ct_icmp_quote_key reads what ICMP error info (l4: its ICMP header) quotes
 * into q and fills key (dir set by the caller) with the tuple going the
 * other way: the quoted packet's reply. Returns 0 for destination
 * unreachable or time exceeded, addressed to the quote's source, quoting
 * TCP or UDP; else -1.
 */
static __always_inline int ct_icmp_quote_key(struct __sk_buff *skb, const struct ipv4_info *info,
					     const struct l4_info *l4, struct icmp_quote *q,
					     struct ct_key *key)
{
	if (l4->icmp_type != ICMP_DEST_UNREACH && l4->icmp_type != ICMP_TIME_EXCEEDED)
		return -1;
	if (icmp_quote_parse(skb, info, q) < 0 || q->ip.saddr != info->daddr ||
	    (q->ip.protocol != IPPROTO_TCP && q->ip.protocol != IPPROTO_UDP))
		return -1;
	key->saddr = q->ip.daddr;
	key->daddr = q->ip.saddr;
	key->sport = q->dport;
	key->dport = q->sport;
	key->proto = q->ip.protocol;
	return 0;
}

/*
 * ct_icmp_error_xlate translates an ICMP error (l4: its ICMP header, as
 * l4_parse filled it) about the forward packet of a load-balanced flow of
 * map (myelin_lb_ct or myelin_lb_ct_nodeport) back
 * to what the client sent (also: a second map looked up when map has no
 * entry, or NULL). Destination unreachable (fragmentation needed
 * included) and time exceeded, from the backend or from a router on the
 * way, quote the packet as the backend was to get it (client -> backend):
 * the quote's destination address and port become the frontend's; an error
 * from the backend itself comes from the frontend; for a hairpin flow the
 * quote's source and the error's destination become the client. Returns 0
 * with the entry's flags in *flags (0: not about such a flow, untouched), or
 * a DROP_* reason.
 */
static __always_inline int ct_icmp_error_xlate(void *map, void *also, struct __sk_buff *skb,
					       struct ipv4_info *info, const struct l4_info *l4,
					       __u16 *flags)
{
	struct icmp_quote q = {};
	struct ct_key key = {.dir = CT_DIR_REVERSE};
	const struct ct_entry *e;
	__be32 front, client;
	__be16 port;

	/* The reply tuple of the quoted packet names the flow. */
	if (ct_icmp_quote_key(skb, info, l4, &q, &key) < 0)
		return 0;
	e = ct_lookup(map, &key);
	if (!e && also)
		e = ct_lookup(also, &key);
	if (!e)
		return 0;
	front = e->front_addr;
	port = e->front_port;
	client = e->client_addr;
	*flags = e->flags;
	if (info->saddr == q.ip.daddr) {
		if (l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, front) < 0)
			return DROP_INVALID_PACKET;
		info->saddr = front;
	}
	if (icmp_quote_set_addr(skb, &q, offsetof(struct iphdr, daddr), q.ip.daddr, front) < 0 ||
	    l4_rewrite_port(skb, l4, q.dport_off, q.dport, port) < 0)
		return DROP_INVALID_PACKET;
	if (!(*flags & CT_F_HAIRPIN))
		return 0;
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, client) < 0 ||
	    icmp_quote_set_addr(skb, &q, offsetof(struct iphdr, saddr), q.ip.saddr, client) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = client;
	return 0;
}

/*
 * ct_icmp_reply is ct_icmp_error_xlate for an ICMP packet not yet parsed:
 * echo and other messages cost one 8-byte read, errors a conntrack lookup.
 */
static __always_inline int ct_icmp_reply(void *map, struct __sk_buff *skb, struct ipv4_info *info,
					 __u16 *flags)
{
	struct l4_info l4 = {};

	if (l4_parse(skb, info, &l4) < 0)
		return 0;
	return ct_icmp_error_xlate(map, NULL, skb, info, &l4, flags);
}

/*
 * ct_icmp_error_to_backend translates an ICMP error a client pod sends about
 * a reply of its flow of map (l4: the error's ICMP header), whose quote is
 * the reply as the client got it (frontend -> client), to the flow's
 * backend: the error's destination and the quote's source address and port
 * become the backend's, as the backend sent the reply. A UDP client's port
 * unreachable (its socket closed before the answer came) then reaches the
 * backend, not the frontend address, which nothing answers. Only the
 * quote's destination may send it (a pod's source is checked: its own
 * flows). Hairpin flows are left alone. Returns 0 (untouched when not
 * about such a flow) or a DROP_* reason.
 */
static __always_inline int ct_icmp_error_to_backend(void *map, struct __sk_buff *skb,
						    struct ipv4_info *info,
						    const struct l4_info *l4)
{
	struct icmp_quote q = {};
	struct ct_key key = {.dir = CT_DIR_FORWARD};
	const struct ct_entry *e;

	/* The flow's forward tuple, the client to the frontend, from its sender. */
	if (ct_icmp_quote_key(skb, info, l4, &q, &key) < 0 || q.ip.daddr != info->saddr)
		return 0;
	e = ct_lookup(map, &key);
	if (!e || (e->flags & CT_F_HAIRPIN))
		return 0;
	if (icmp_error_redirect(skb, info, l4, &q, e->be_addr, e->be_port) < 0)
		return DROP_INVALID_PACKET;
	return 0;
}

/*
 * ct_reply_to_pod is ct_reply_xlate for a packet about to enter a pod, only
 * with load balancing on: a conntrack lookup for a TCP or UDP packet from a
 * port a backend may use (ct_from_backend_port; other whole datagrams cost
 * a read of their header from the linear data and a bit test), for every
 * fragment of a fragmented one. ICMP errors about service flows are
 * translated too (ct_icmp_reply), and later fragments follow their first
 * (frag.h). Returns 0 or a DROP_* reason.
 */
static __always_inline int ct_reply_to_pod(struct __sk_buff *skb, struct ipv4_info *info)
{
	__be32 saddr = info->saddr, daddr = info->daddr;
	int route = 0, hit = 0, reason;
	struct l4_info l4 = {};
	__u16 flags = 0;

	if (!lb_enabled)
		return 0;
	if (ipv4_later_frag(info))
		return frag_follow(skb, info, FRAG_STAGE_TO_POD, &route, &hit);
	if (info->proto == IPPROTO_ICMP)
		return ct_icmp_reply(&myelin_lb_ct, skb, info, &flags);
	if (ct_l4_parse(skb, info, &l4) < 0)
		return 0;
	/* A first fragment goes on: its note clears a stale one (frag_note). */
	if (!info->frag && !ct_from_backend_port(l4.sport))
		return 0;
	reason = ct_reply_xlate(&myelin_lb_ct, skb, info, &l4, &flags, 0);
	if (!reason)
		frag_note(skb, info, saddr, daddr, FRAG_STAGE_TO_POD, 0);
	return reason;
}

#endif /* MYELIN_LIB_CT_H */
