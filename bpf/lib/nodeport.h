/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NodePort SNAT: a NodePort flow to a backend on another node is translated
 * to node_ip and a NAT port of its own, in tables strangers filling them
 * can't turn against anything else. A new flow lives in the LRU
 * myelin_nodeport_syn (embryonic) until the client acknowledges the
 * backend's SYN-ACK (TCP: it moves to myelin_nodeport_nat, established, a
 * plain hash the agent collects) or sends again after a reply (UDP: it moves
 * to the LRU myelin_nodeport_udp, where a flood of answered datagrams from
 * forged sources evicts idle UDP flows only). A flood of SYNs from forged
 * sources never gets past the first table: it evicts older embryonic flows,
 * never established ones, pods' masquerade entries (myelin_snat) or service
 * conntrack (myelin_lb_ct). Entries carry the backend and the NodePort, so
 * these flows need no myelin_lb_ct entry.
 *
 * The backend's replies, and ICMP errors about the flows, are translated back
 * in nodeport_reply.h.
 *
 * NAT ports come from nat_port_min..nat_port_max like masquerade's, claimed
 * in myelin_nodeport_syn first and then checked against myelin_nodeport_nat,
 * myelin_nodeport_udp and myelin_snat (nat_claim does the mirror image), so
 * no two flows of the four tables share a reverse tuple.
 */
#ifndef MYELIN_LIB_NODEPORT_H
#define MYELIN_LIB_NODEPORT_H

#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "clock.h"
#include "config.h"
#include "l4.h"
#include "maps.h"
#include "nat.h"
#include "reasons.h"

/* An embryonic flow idle this long gives its NAT port to a new flow that needs it. */
#define NP_SYN_RECLAIM_NS (5 * 1000000000ULL)

/* np_count bumps the NodePort counter i (per CPU: plain increment). */
static __always_inline void np_count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&myelin_nodeport_stats, &i);

	if (c)
		*c += 1;
}

/*
 * np_touch records a packet of e's flow, like nat_touch, and returns 1 when
 * it refreshed last_seen (at most once a second).
 */
static __always_inline int np_touch(struct np_entry *e, __u16 flags)
{
	__u64 now = clock_coarse_ns();
	int refreshed = now - e->last_seen > NAT_REFRESH_NS;

	if (refreshed)
		e->last_seen = now;
	if ((e->flags & flags) != flags)
		e->flags |= flags;
	return refreshed;
}

/*
 * np_pair_key is the key, in direction dir, of the other entry of the flow whose
 * entry e has key k: the client's tuple (NAT_DIR_EGRESS) from the reverse
 * entry, the backend's reply tuple (NAT_DIR_INGRESS) from the forward entry.
 * Each entry holds the other's source address and ports; both go to node_ip.
 */
static __always_inline void np_pair_key(struct nat_key *pair, const struct nat_key *k,
					const struct np_entry *e, __u8 dir)
{
	pair->saddr = e->addr;
	pair->daddr = node_ip;
	pair->sport = e->port;
	pair->dport = e->xport;
	pair->proto = k->proto;
	pair->dir = dir;
	pair->pad = 0;
}

/*
 * np_fwd_ours says whether the forward entry fv is the flow whose reverse
 * entry has key rev: the client's tuple may hold a new flow by now (the LRU
 * evicted the old flow's forward entry, or np_embryonic forgot it, while
 * its reverse entry waits for np_reclaim).
 */
static __always_inline int np_fwd_ours(const struct np_entry *fv, const struct nat_key *rev)
{
	return fv && fv->addr == rev->saddr && fv->port == rev->sport && fv->xport == rev->dport;
}

/*
 * np_reclaim frees the port of the embryonic flow holding rev when it has
 * been idle NP_SYN_RECLAIM_NS: without it, stale embryonic flows could hold
 * every port towards a backend and nothing would evict them. Returns 1 when
 * the port is free now.
 */
static __always_inline int np_reclaim(const struct nat_key *rev)
{
	const struct np_entry *e = bpf_map_lookup_elem(&myelin_nodeport_syn, rev);
	struct nat_key fwd;

	if (!e || clock_age_ns(clock_coarse_ns(), e->last_seen) < NP_SYN_RECLAIM_NS)
		return 0;
	np_pair_key(&fwd, rev, e, NAT_DIR_EGRESS);
	if (np_fwd_ours(bpf_map_lookup_elem(&myelin_nodeport_syn, &fwd), rev))
		bpf_map_delete_elem(&myelin_nodeport_syn, &fwd);
	bpf_map_delete_elem(&myelin_nodeport_syn, rev);
	return 1;
}

/*
 * np_claim makes the embryonic reverse entry rev, with dport set to port,
 * point at rv. Returns 0 when claimed, 1 when another flow owns the tuple,
 * or -1 on an insert error.
 */
static __always_inline int np_claim(struct nat_key *rev, const struct np_entry *rv, __be16 port)
{
	long rc;

	rev->dport = port;
	rc = bpf_map_update_elem(&myelin_nodeport_syn, rev, rv, BPF_NOEXIST);
	if (rc == -EEXIST && np_reclaim(rev))
		rc = bpf_map_update_elem(&myelin_nodeport_syn, rev, rv, BPF_NOEXIST);
	if (rc == -EEXIST)
		return 1;
	if (rc < 0)
		return -1;
	if (nat_port_nodeport_answered(rev) || bpf_map_lookup_elem(&myelin_snat, rev)) {
		bpf_map_delete_elem(&myelin_nodeport_syn, rev);
		return 1;
	}
	return 0;
}

/* A SYN arriving with fewer hops left gets no number (np_client_isn): it may
 * expire before the backend. Clients' SYNs arrive with 64 or more minus
 * their path's hops. */
#define NP_SYN_TTL_MIN 8

/*
 * np_client_isn is the sequence number + 1 of a client's TCP SYN (the number
 * the backend's SYN-ACK acknowledges), or 0 for any other packet. A SYN a
 * backend may drop unanswered gets 0 too, as a forger who sent it could
 * answer it unraced (np_reply_seen): one with FIN or RST, a fragment, one
 * with IP options (a source route), with fewer than NP_SYN_TTL_MIN hops
 * left, or whose TCP header length is out of bounds.
 */
static __always_inline __u32 np_client_isn(struct __sk_buff *skb, const struct ipv4_info *info,
					   const struct l4_info *l4)
{
	struct l4_head h = {};
	__be16 tot_len;
	__u32 doff;

	if (!l4->tcp_opening || l4->tcp_closing || info->frag || info->ttl < NP_SYN_TTL_MIN ||
	    info->l4_off != ETH_HLEN + sizeof(struct iphdr) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tot_len), &tot_len,
			       sizeof(tot_len)) < 0 ||
	    l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0)
		return 0;
	doff = (h.doff >> 4) * 4;
	if (doff < sizeof(struct tcphdr) || sizeof(struct iphdr) + doff > bpf_ntohs(tot_len))
		return 0;
	return bpf_ntohl(h.seq) + 1;
}

/*
 * np_create creates the embryonic flow fwd (client -> node_ip:nodePort) to
 * backend id at be for the client's packet l4, and returns 0 with its
 * forward entry in *fv, or a DROP_* reason. The forward entry keeps isn
 * (np_client_isn) until the SYN-ACK acknowledging it (np_reply_seen): only
 * the SYN that created the flow sets it, so a forger's second SYN can't move
 * it past the backend's answer to the first.
 */
static __always_inline int np_create(const struct nat_key *fwd, __u32 id,
				     const struct lb_backend *be, const struct l4_info *l4,
				     __u32 isn, struct np_entry *fv)
{
	__u16 flags = l4->tcp_closing ? NAT_F_CLOSING : 0;
	__u64 now = clock_coarse_ns();
	struct nat_key rev = {
		.saddr = be->addr,
		.daddr = node_ip,
		.sport = be->port,
		.proto = fwd->proto,
		.dir = NAT_DIR_INGRESS,
	};
	struct np_entry rv = {
		.last_seen = now,
		.addr = fwd->saddr,
		.port = fwd->sport,
		.xport = fwd->dport,
		.flags = flags,
	};
	__u32 start = bpf_get_prandom_u32();
	int rc = 1;

	for (__u32 i = 0; i < NAT_PORT_TRIES; i++) {
		rc = np_claim(&rev, &rv, bpf_htons(nat_port_at(start, i)));
		if (rc <= 0)
			break;
	}
	if (rc < 0)
		return DROP_NODEPORT_NAT_FULL;
	if (rc > 0)
		return DROP_NAT_NO_PORT;
	*fv = (struct np_entry){.last_seen = now,
				.addr = be->addr,
				.backend_id = id,
				.port = be->port,
				.xport = rev.dport,
				.reply_seq = isn,
				.flags = flags};
	if (bpf_map_update_elem(&myelin_nodeport_syn, fwd, fv, BPF_ANY) < 0) {
		bpf_map_delete_elem(&myelin_nodeport_syn, &rev);
		return DROP_NODEPORT_NAT_FULL;
	}
	np_count(NP_STAT_SYN_CREATED);
	return 0;
}

/*
 * np_ours says whether the reverse entry rv belongs to the flow fwd: an
 * embryonic flow's reverse entry may have been evicted, and its port
 * claimed by another flow since.
 */
static __always_inline int np_ours(const struct np_entry *rv, const struct nat_key *fwd)
{
	return rv && rv->addr == fwd->saddr && rv->port == fwd->sport && rv->xport == fwd->dport;
}

/* np_ours_or_gone is np_ours, or true when there is no reverse entry rv. */
static __always_inline int np_ours_or_gone(const struct np_entry *rv, const struct nat_key *fwd)
{
	return !rv || np_ours(rv, fwd);
}

/*
 * np_handshake_done says whether the client's packet completes the flow's
 * handshake: a TCP ACK without SYN of exactly the SYN-ACK np_reply_seen
 * recorded (its sequence number + 1, which a blind attacker guesses one in
 * 2^32; a backend sends no data before that ACK reached it, unless it
 * answers a Fast Open SYN's data, so an honest client's segments carry that
 * number until then), or a UDP datagram after a reply.
 */
static __always_inline int np_handshake_done(struct __sk_buff *skb, const struct ipv4_info *info,
					     const struct l4_info *l4, const struct np_entry *fv)
{
	struct l4_head h = {};

	if (!(fv->flags & NAT_F_REPLIED))
		return 0;
	if (info->proto != IPPROTO_TCP)
		return 1;
	if (l4->tcp_syn || l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0)
		return 0;
	return (h.flags & TCP_FLAGS_ACK) && bpf_ntohl(h.ack) == fv->reply_seq;
}

/*
 * np_move writes the embryonic flow fwd (forward entry fv, reverse entry rv
 * at rev) into map (myelin_nodeport_nat or myelin_nodeport_udp), reverse
 * entry first, and deletes it from myelin_nodeport_syn. Returns 0; -1 with
 * the flow left embryonic (map full); 1 when the flow lost its port
 * meanwhile (forget it); or 2 when another CPU is moving it.
 */
static __always_inline int np_move(void *map, const struct nat_key *fwd, const struct np_entry *fv,
				   const struct nat_key *rev, const struct np_entry *rv)
{
	long rc;

	rc = bpf_map_update_elem(map, rev, rv, BPF_NOEXIST);
	/* Being moved by another CPU, which owns the move; any other owner was
	 * excluded when the port was claimed. */
	if (rc == -EEXIST)
		return np_ours(bpf_map_lookup_elem(map, rev), fwd) ? 2 : 1;
	if (rc < 0)
		return -1;
	if (!np_ours_or_gone(bpf_map_lookup_elem(&myelin_nodeport_syn, rev), fwd) ||
	    bpf_map_lookup_elem(&myelin_snat, rev)) {
		/* The flow's embryonic reverse entry went after the caller's check
		 * (np_reclaim on another CPU, or the LRU), and its port to a new
		 * flow or to masquerade, which claimed it in its own table before
		 * looking here: one of the two sees the other. */
		bpf_map_delete_elem(map, rev);
		return 1;
	}
	if (bpf_map_update_elem(map, fwd, fv, BPF_ANY) < 0) {
		bpf_map_delete_elem(map, rev);
		return -1;
	}
	bpf_map_delete_elem(&myelin_nodeport_syn, fwd);
	bpf_map_delete_elem(&myelin_nodeport_syn, rev);
	return 0;
}

/*
 * np_promote moves the embryonic flow fwd (forward entry fv, reverse entry
 * at rev) past its handshake: TCP to myelin_nodeport_nat (full: returns
 * DROP_NODEPORT_NAT_FULL with the flow left embryonic), UDP to the LRU
 * myelin_nodeport_udp (a failed move leaves the flow embryonic and passes
 * the packet: the next datagram tries again). Returns 0, 1 when the flow
 * lost its port (forget it), or a DROP_* reason.
 */
static __always_inline int np_promote(const struct nat_key *fwd, const struct np_entry *fv,
				      const struct nat_key *rev, const struct np_entry *rv)
{
	int rc;

	if (fwd->proto == IPPROTO_UDP) {
		rc = np_move(&myelin_nodeport_udp, fwd, fv, rev, rv);
		if (rc == 0)
			np_count(NP_STAT_UDP_ANSWERED);
		return rc == 1;
	}
	rc = np_move(&myelin_nodeport_nat, fwd, fv, rev, rv);
	if (rc < 0)
		return DROP_NODEPORT_NAT_FULL;
	if (rc == 0)
		np_count(NP_STAT_PROMOTED);
	return rc == 1;
}

/*
 * np_forget deletes flow fwd (forward entry fv) from table map: its forward
 * entry, and its reverse entry while that is its own (an LRU may have
 * evicted it and another flow claimed the port since).
 */
static __always_inline void np_forget(void *map, const struct nat_key *fwd,
				      const struct np_entry *fv)
{
	struct nat_key rev;

	np_pair_key(&rev, fwd, fv, NAT_DIR_INGRESS);
	bpf_map_delete_elem(map, fwd);
	if (np_ours(bpf_map_lookup_elem(map, &rev), fwd))
		bpf_map_delete_elem(map, &rev);
}

/*
 * np_embryonic handles a client's packet of the embryonic flow fwd (forward
 * entry e): its reverse entry must still be its own (else the flow is
 * forgotten and 1 returned: create it again, unless another CPU has just
 * moved it); a packet completing the handshake promotes it. Returns 0 with
 * the entry in *fv, 1, or a DROP_* reason.
 */
static __always_inline int np_embryonic(struct __sk_buff *skb, const struct ipv4_info *info,
					const struct l4_info *l4, const struct nat_key *fwd,
					struct np_entry *e, struct np_entry *fv)
{
	const struct np_entry *r;
	struct nat_key rev;
	struct np_entry rv;
	int rc;

	np_touch(e, l4->tcp_closing ? NAT_F_CLOSING : 0);
	*fv = *e;
	np_pair_key(&rev, fwd, fv, NAT_DIR_INGRESS);
	r = bpf_map_lookup_elem(&myelin_nodeport_syn, &rev);
	if (!r)
		goto forget;
	/* A copy: the LRU may reuse the element once another CPU deleted it. */
	rv = *r;
	if (!np_ours(&rv, fwd))
		goto forget;
	if (!np_handshake_done(skb, info, l4, fv))
		return 0;
	rc = np_promote(fwd, fv, &rev, &rv);
	if (rc != 1)
		return rc;
forget:
	bpf_map_delete_elem(&myelin_nodeport_syn, fwd);
	return 1;
}

/*
 * np_udp_flow finds a client's datagram (key fwd) among the answered UDP
 * flows. The LRU may have evicted the reverse entry alone, and another flow
 * claimed its port since: then the flow is forgotten (NULL), and the
 * datagram starts a new one.
 */
static __always_inline struct np_entry *np_udp_flow(const struct nat_key *fwd)
{
	struct np_entry *e = bpf_map_lookup_elem(&myelin_nodeport_udp, fwd);
	struct nat_key rev;

	if (!e)
		return NULL;
	np_pair_key(&rev, fwd, e, NAT_DIR_INGRESS);
	if (np_ours(bpf_map_lookup_elem(&myelin_nodeport_udp, &rev), fwd))
		return e;
	bpf_map_delete_elem(&myelin_nodeport_udp, fwd);
	return NULL;
}

/*
 * np_established finds the flow fwd past its handshake: among the answered
 * UDP flows, then in myelin_nodeport_nat (TCP, and UDP flows an older
 * version moved there, which the agent's GC moves on); *map is the table.
 */
static __always_inline struct np_entry *np_established(const struct nat_key *fwd, void **map)
{
	struct np_entry *e = NULL;

	if (fwd->proto == IPPROTO_UDP) {
		*map = &myelin_nodeport_udp;
		e = np_udp_flow(fwd);
	}
	if (!e) {
		*map = &myelin_nodeport_nat;
		e = bpf_map_lookup_elem(&myelin_nodeport_nat, fwd);
	}
	return e;
}

/* np_backend_gone says whether flow fv's backend id no longer names its backend. */
static __always_inline int np_backend_gone(const struct np_entry *fv)
{
	const struct lb_backend *b = bpf_map_lookup_elem(&myelin_lb_backends, &fv->backend_id);

	return !b || b->addr != fv->addr || b->port != fv->port;
}

/*
 * np_flow finds the NodePort SNAT flow of a client's packet (key fwd):
 * established (np_established), then embryonic. A flow whose backend is
 * gone (or whose id now names another backend) is forgotten, to select
 * again; an embryonic one before its packet could move it. Returns 0 with
 * the forward entry in *fv, 1 when there is no flow, or a DROP_* reason.
 */
static __always_inline int np_flow(struct __sk_buff *skb, const struct ipv4_info *info,
				   const struct l4_info *l4, const struct nat_key *fwd,
				   struct np_entry *fv)
{
	void *map = &myelin_nodeport_nat;
	struct np_entry *e;
	int rc;

	e = np_established(fwd, &map);
	if (!e) {
		e = bpf_map_lookup_elem(&myelin_nodeport_syn, fwd);
		if (!e)
			return 1;
		if (np_backend_gone(e)) {
			*fv = *e;
			np_forget(&myelin_nodeport_syn, fwd, fv);
			return 1;
		}
		rc = np_embryonic(skb, info, l4, fwd, e, fv);
		if (rc != 1)
			return rc;
		/* Forgotten: unless another CPU moved it past its handshake just now. */
		e = np_established(fwd, &map);
		if (!e)
			return 1;
	}
	np_touch(e, l4->tcp_closing ? NAT_F_CLOSING : 0);
	*fv = *e;
	if (!np_backend_gone(fv))
		return 0;
	np_forget(map, fwd, fv);
	return 1;
}

/*
 * np_snat translates a client's packet of flow fv: destination to the
 * backend, source to node_ip and the flow's NAT port.
 */
static __always_inline int np_snat(struct __sk_buff *skb, struct ipv4_info *info,
				   struct l4_info *l4, const struct np_entry *fv)
{
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, fv->addr) < 0 ||
	    l4_rewrite_port(skb, l4, l4->rport_off, l4->dport, fv->port) < 0 ||
	    l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, node_ip) < 0 ||
	    l4_rewrite_port(skb, l4, l4->port_off, l4->sport, fv->xport) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = fv->addr;
	info->saddr = node_ip;
	l4->dport = fv->port;
	l4->sport = fv->xport;
	return 0;
}

#endif /* MYELIN_LIB_NODEPORT_H */
