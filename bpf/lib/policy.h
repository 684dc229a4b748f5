/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy (docs/policy.md). Egress is checked where a pod's packet
 * leaves it (myelin_from_pod, after the Service stage), ingress where a
 * packet enters a pod (endpoint_deliver for what BPF delivers, myelin_to_pod
 * for what the stack delivers), in both host routing modes.
 *
 * A pod's isolation flags come with its myelin_endpoints entry, which the
 * programs look up anyway (myelin_policy_eps answers when there is none): a
 * pod that is not isolated costs a test of those flags. An isolated pod's
 * established connections cost one myelin_policy_ct lookup per check (one
 * entry per connection, shared by both its directions and by both ends when
 * they are pods of this node). A new connection in an isolated direction
 * looks the peer's identity up in myelin_ipcache (a miss is world), then its
 * allowed ports in myelin_policy (the identity's entry, then the any-peer
 * entry 0); allowed, the end's bit is set in the connection's entry, so its
 * replies pass. A TCP SYN without ACK opens a connection: it never takes the
 * tracked path and is
 * judged by the policy again (and tracked again if allowed), so a tightened
 * policy or a reused peer address never inherits an old entry; the agent
 * deletes the entries of changed endpoints and removed peers for the other
 * protocols. A TCP connection's entry is deleted once both ends' FINs are
 * acknowledged (policy_ct_close), so closed connections give their entries
 * back instead of making every new connection evict one from the full LRU.
 * Traffic the host itself sends from this node's own address
 * (kubelet probes: myelin_to_pod with ingress_ifindex 0) is allowed in; the
 * same source on a packet from the uplink or the overlay is never exempt
 * (those programs drop it as spoofed before it reaches a pod).
 */
#ifndef MYELIN_LIB_POLICY_H
#define MYELIN_LIB_POLICY_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "ipv4.h"
#include "l4.h"
#include "maps.h"

#define POLICY_IDENTITY_WORLD	2    /* an address myelin_ipcache does not cover */
#define POLICY_TCP_FIN		0x01 /* the TCP flags byte's FIN bit */
#define POLICY_IPV4_TOT_LEN_OFF (ETH_HLEN + 2)

/* policy_tuple is a packet's tuple as policy sees it (network order). */
struct policy_tuple {
	__u32 saddr;
	__u32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 syn;	/* a TCP SYN without ACK: a new connection, never tracked-path */
	__u8 from_host; /* sent by this host's stack: node_ip is exempt (kubelet probes) */
	__u8 flags;	/* the local pod's enum policy_flags */
	__u8 tcp_flags; /* TCP: the header's flags byte; 0 for other protocols */
	__u32 ack;	/* TCP: the acknowledgment number (host order) */
	__u32 fin_end;	/* TCP FIN: the acknowledgment number that covers it (host order) */
};

/* policy_ct_seen is what a check found in the connection's tracked entry. */
struct policy_ct_seen {
	__u32 ends;   /* the noted ends (enum policy_ct_ends) */
	__u32 fresh;  /* a SYN: the end bit it started the entry afresh with, else 0 */
	__u8 closing; /* the packet is part of the connection's close (FIN, or after one) */
	struct policy_ct_entry entry; /* the entry as read (valid when closing is set) */
};

/* policy_enforce's fresh_also for a SYN the stack delivers: its bit is added to the entry. */
#define POLICY_CT_MERGE 0xff
/* policy_enforce's fresh_also for a SYN whose receiver's check may write the entry
 * (policy_egress): nothing is written, seen->fresh says what is pending. */
#define POLICY_CT_DEFER 0xfe

/* policy_rx is what the egress check tells the ingress check of the same packet. */
enum policy_rx {
	POLICY_RX_TRACKED = 1, /* the receiver's end is tracked: pass, no lookup */
	POLICY_RX_CLOSING = 2, /* tracked, and the packet is part of the close: follow
				* it on info->policy_ct, no lookup */
};

#define POLICY_F_ISOLATED (POLICY_F_INGRESS | POLICY_F_EGRESS)

/*
 * policy_ep_flags returns the isolation flags of local pod addr: from its
 * endpoint entry ep when the caller has it (the agent mirrors the flags
 * there, so the check costs no lookup), else from myelin_policy_eps.
 */
static __always_inline __u8 policy_ep_flags(const struct endpoint_info *ep, __u32 addr)
{
	const struct policy_ep *pe;

	if (ep)
		return ep->flags;
	pe = bpf_map_lookup_elem(&myelin_policy_eps, &addr);
	return pe ? pe->flags : 0;
}

/* policy_l4_hdr is the start of a TCP header up to its flags (UDP and SCTP: the ports). */
struct policy_l4_hdr {
	__be16 sport;
	__be16 dport;
	__be32 seq;
	__be32 ack;
	__u8 doff; /* data offset in 4-byte words, upper nibble */
	__u8 flags;
};

#define POLICY_TCP_HDR_LOAD (TCP_FLAGS_OFF + 1) /* bytes of policy_l4_hdr a TCP packet loads */
#define POLICY_L4_OFF_MAX   (ETH_HLEN + 60)	/* the farthest an L4 header starts (IHL 15) */

/*
 * policy_fin_end is the acknowledgment number that covers the FIN of TCP
 * header h: its sequence number plus its payload (by the IPv4 total length,
 * not the frame, which may be padded; by the frame for a BIG TCP packet,
 * whose total length is 0) plus one for the FIN.
 */
static __always_inline __u32 policy_fin_end(struct __sk_buff *skb, const struct ipv4_info *info,
					    const struct policy_l4_hdr *h)
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
 * policy_l4_load copies the first n bytes of the L4 header at info->l4_off
 * into h: straight from the packet when they lie in its linear data (the
 * usual case: no helper call), else through bpf_skb_load_bytes. Returns 0,
 * or a negative value when the packet is too short.
 */
static __always_inline int policy_l4_load(struct __sk_buff *skb, const struct ipv4_info *info,
					  struct policy_l4_hdr *h, __u32 n)
{
	void *data_end = (void *)(long)skb->data_end;
	__u32 off = info->l4_off;
	__u8 *p;

	if (off <= POLICY_L4_OFF_MAX) {
		p = (void *)(long)skb->data + off;
		if ((void *)(p + POLICY_TCP_HDR_LOAD) <= data_end) {
			const struct policy_l4_hdr *ph = (const void *)p;

			h->sport = ph->sport;
			h->dport = ph->dport;
			h->seq = ph->seq;
			h->ack = ph->ack;
			h->doff = ph->doff;
			h->flags = ph->flags;
			return 0;
		}
	}
	return bpf_skb_load_bytes(skb, off, h, n);
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
	struct policy_l4_hdr h = {};

	if (!info->l4_off)
		return;
	if (info->proto == IPPROTO_TCP) {
		if (policy_l4_load(skb, info, &h, POLICY_TCP_HDR_LOAD) < 0)
			return;
		t->syn = (h.flags & (TCP_FLAGS_SYN | TCP_FLAGS_ACK)) == TCP_FLAGS_SYN;
		t->tcp_flags = h.flags;
		t->ack = bpf_ntohl(h.ack);
		if (h.flags & POLICY_TCP_FIN)
			t->fin_end = policy_fin_end(skb, info, &h);
	} else if (info->proto == IPPROTO_UDP || info->proto == IPPROTO_SCTP) {
		if (policy_l4_load(skb, info, &h, 4) < 0)
			return;
	}
	t->sport = h.sport;
	t->dport = h.dport;
}

/* policy_port_allowed says whether v allows proto/port (host order). */
static __always_inline int policy_port_allowed(const struct policy_value *v, __u8 proto, __u16 port)
{
	for (int i = 0; i < POLICY_PORTS_MAX; i++) {
		const struct policy_port *p = &v->ports[i];

		if (i >= v->count)
			break;
		if (!p->proto)
			return 1;
		if (p->proto == proto && port >= p->lo && port <= p->hi)
			return 1;
	}
	return 0;
}

/* policy_allows looks up what local allows to or from peer in direction dir. */
static __always_inline int policy_allows(__u32 local, __u32 peer, const struct policy_tuple *t,
					 __u8 dir)
{
	struct ipcache_key ck = {.prefixlen = 32, .addr = peer};
	struct policy_key key = {.ep_addr = local, .dir = dir};
	const struct ipcache_value *id;
	const struct policy_value *v;
	__u16 port = bpf_ntohs(t->dport);

	id = bpf_map_lookup_elem(&myelin_ipcache, &ck);
	key.identity = id ? id->identity : POLICY_IDENTITY_WORLD;
	v = bpf_map_lookup_elem(&myelin_policy, &key);
	if (v && policy_port_allowed(v, t->proto, port))
		return 1;
	key.identity = 0;
	v = bpf_map_lookup_elem(&myelin_policy, &key);
	return v && policy_port_allowed(v, t->proto, port);
}

/*
 * policy_ct_key_of fills the tracking key of tuple t (its lower address and
 * port end first, so both directions share it) and returns the bit of the
 * end whose check of direction dir this is.
 */
static __always_inline __u32 policy_ct_key_of(struct policy_ct_key *k, const struct policy_tuple *t,
					      __u8 dir)
{
	int src_lo = t->saddr < t->daddr || (t->saddr == t->daddr && t->sport <= t->dport);
	int local_src = dir == POLICY_DIR_EGRESS;

	k->addr_lo = src_lo ? t->saddr : t->daddr;
	k->addr_hi = src_lo ? t->daddr : t->saddr;
	k->port_lo = src_lo ? t->sport : t->dport;
	k->port_hi = src_lo ? t->dport : t->sport;
	k->proto = t->proto;
	return src_lo == local_src ? POLICY_CT_END_LO : POLICY_CT_END_HI;
}

/*
 * policy_ct_track notes that the local end (bit) accepted the connection of
 * k: its replies and later packets pass this end without a policy lookup.
 * fresh: the packet is a SYN whose entry starts afresh, holding this end's
 * bit and also (the other end's bit when the egress check of this same
 * packet, on this node, allowed it and left the write to this check: a SYN
 * between two pods of the node);
 * no lookup first. Otherwise (a packet that found no bit of this end, or a
 * SYN the stack delivers) the end's bit is added to what the entry holds
 * (cur: the entry as the caller read it, or NULL to look it up); a SYN
 * clears an old close state.
 * Entries are only ever written whole, through bpf_map_update_elem under
 * their own key, never through a looked-up pointer: a preallocated element
 * that another CPU deleted meanwhile may already hold another connection,
 * and a write through the pointer would give that connection an end it
 * never accepted.
 */
static __always_inline void policy_ct_track(const struct policy_ct_key *k,
					    const struct policy_ct_entry *cur, __u32 bit,
					    __u32 also, int fresh, int syn)
{
	struct policy_ct_entry ce = {.ends = bit | also};
	const struct policy_ct_entry *v;

	if (!fresh) {
		if (!cur) {
			v = bpf_map_lookup_elem(&myelin_policy_ct, k);
			if (v)
				ce = *v; /* copied at once: see above */
			cur = v ? &ce : NULL;
		} else {
			ce = *cur;
		}
		if (cur) {
			if ((ce.ends & bit) && !(syn && ce.closing))
				return;
			ce.ends |= bit;
			if (syn)
				ce.closing = 0;
		}
	}
	bpf_map_update_elem(&myelin_policy_ct, k, &ce, BPF_ANY);
}

/*
 * policy_ct_close follows the close of a tracked TCP connection through the
 * packets of tuple t (src_lo: its sender is the lo end; cur: a copy of the
 * entry of k): a FIN notes which acknowledgment number covers it, an ACK
 * from the other end that reaches that number marks it acknowledged, and
 * once both FINs are, the entry is deleted. Only the last check of a packet
 * on this node calls it, so the packet itself never needs the entry again;
 * a FIN retransmitted because the last ACK was lost is judged by the policy
 * like any untracked packet. It only ever deletes: a packet it sees can make
 * no end pass. A changed close state is written whole under k with
 * BPF_EXIST (policy_ct_track says why not through the pointer): an entry
 * deleted meanwhile stays deleted.
 */
static __always_inline void policy_ct_close(const struct policy_ct_key *k,
					    struct policy_ct_entry *cur,
					    const struct policy_tuple *t, int src_lo)
{
	__u32 closing = cur->closing;

	/* An end's first FIN is noted once: its retransmissions cover the same
	 * number, and a later FIN with another (forged) number can't move it. */
	if ((t->tcp_flags & POLICY_TCP_FIN) &&
	    !(closing & (src_lo ? POLICY_CT_FIN_LO : POLICY_CT_FIN_HI))) {
		if (src_lo)
			cur->fin_lo = t->fin_end;
		else
			cur->fin_hi = t->fin_end;
		closing |= src_lo ? POLICY_CT_FIN_LO : POLICY_CT_FIN_HI;
	}
	if (t->tcp_flags & TCP_FLAGS_ACK) {
		if (!src_lo && (closing & POLICY_CT_FIN_LO) && (__s32)(t->ack - cur->fin_lo) >= 0)
			closing |= POLICY_CT_ACKED_LO;
		if (src_lo && (closing & POLICY_CT_FIN_HI) && (__s32)(t->ack - cur->fin_hi) >= 0)
			closing |= POLICY_CT_ACKED_HI;
	}
	if ((closing & (POLICY_CT_ACKED_LO | POLICY_CT_ACKED_HI)) ==
	    (POLICY_CT_ACKED_LO | POLICY_CT_ACKED_HI)) {
		bpf_map_delete_elem(&myelin_policy_ct, k);
		return;
	}
	if (closing != cur->closing) {
		cur->closing = closing;
		bpf_map_update_elem(&myelin_policy_ct, k, cur, BPF_EXIST);
	}
}

/*
 * policy_enforce checks tuple t at local pod's check of direction dir
 * (t->flags: its isolation state). It returns 0 to go on, or the drop
 * reason. *seen gets what the connection's entry said when it was tracked.
 * The close of a tracked TCP connection is followed (policy_ct_close) at the
 * packet's last check on this node: ingress, or egress when the receiving
 * end is not a tracked pod of this node. fresh_also: for a SYN whose entry
 * starts afresh at this check, the other end's bit to keep (policy_ct_track);
 * POLICY_CT_MERGE: a SYN adds its bit to what the entry holds.
 */
static __always_inline int policy_enforce(const struct policy_tuple *t, __u32 local, __u8 dir,
					  __u32 fresh_also, const struct policy_ct_entry *known,
					  struct policy_ct_seen *seen)
{
	const struct policy_ct_entry *v = NULL;
	struct policy_ct_entry cur = {};
	struct policy_ct_key k = {};
	__u8 on, incomplete;
	__u32 peer, bit;
	int fresh;

	bit = policy_ct_key_of(&k, t, dir);
	if (!t->syn) {
		v = known ? known : bpf_map_lookup_elem(&myelin_policy_ct, &k);
		if (v) {
			cur = *v; /* one copy, right after the lookup: see policy_ct_track */
			v = &cur;
		}
		if (v && (cur.ends & bit)) {
			seen->ends = cur.ends;
			if (t->proto != IPPROTO_TCP ||
			    !((t->tcp_flags & POLICY_TCP_FIN) || cur.closing))
				return 0;
			seen->closing = 1;
			seen->entry = cur;
			if (dir == POLICY_DIR_INGRESS ||
			    !(cur.ends & (bit ^ (POLICY_CT_END_LO | POLICY_CT_END_HI))))
				policy_ct_close(&k, &cur, t,
						(bit == POLICY_CT_END_LO) ==
							(dir == POLICY_DIR_EGRESS));
			return 0;
		}
	}
	on = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS : POLICY_F_EGRESS;
	incomplete = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS_INCOMPLETE
					       : POLICY_F_EGRESS_INCOMPLETE;
	peer = dir == POLICY_DIR_INGRESS ? t->saddr : t->daddr;
	if ((t->flags & on) && !(dir == POLICY_DIR_INGRESS && t->from_host && peer == node_ip) &&
	    !policy_allows(local, peer, t, dir))
		return (t->flags & incomplete) ? DROP_POLICY_MAP_FULL : DROP_POLICY_DENIED;
	/* Allowed (or this direction is open): track it, and its replies. */
	fresh = t->syn && fresh_also != POLICY_CT_MERGE;
	if (fresh)
		seen->fresh = bit;
	if (fresh && fresh_also == POLICY_CT_DEFER)
		return 0;
	policy_ct_track(&k, v, bit, fresh ? fresh_also : 0, fresh, t->syn);
	return 0;
}

/*
 * policy_tx_commit writes the fresh entry of a SYN whose egress check left
 * the write to the receiver's check (info->policy_tx_fresh, with the SYN's
 * ports; its addresses are info's): called where that check won't run,
 * because the packet leaves the node or goes to the stack, or its receiver
 * is not isolated. It reads nothing from the packet.
 */
static __always_inline void policy_tx_commit(struct ipv4_info *info)
{
	struct policy_tuple t = {.saddr = info->saddr,
				 .daddr = info->daddr,
				 .sport = info->policy_tx_sport,
				 .dport = info->policy_tx_dport,
				 .proto = info->proto};
	struct policy_ct_entry ce = {.ends = info->policy_tx_fresh};
	struct policy_ct_key k = {};

	if (!info->policy_tx_fresh)
		return;
	policy_ct_key_of(&k, &t, POLICY_DIR_EGRESS);
	bpf_map_update_elem(&myelin_policy_ct, &k, &ce, BPF_ANY);
	info->policy_tx_fresh = 0;
}

/*
 * policy_ingress is the ingress check of the packet info describes, entering
 * the local pod info->daddr (ep: its endpoint entry, or NULL to look the
 * flags up): 0 to go on, or the drop reason. from_host says the host's own
 * stack sent it (only then is node_ip exempt). bpf_delivered: BPF delivers
 * the packet (endpoint_deliver), so a SYN's entry starts afresh here with no
 * lookup: the sender is a pod of another node, or a pod of this node whose
 * egress check of this same packet allowed it and left the write to this
 * check (policy_tx_fresh: its end bit, written here with this end's; when
 * this end is not isolated, alone). What the stack delivers may come from a
 * pod of this node checked in an earlier program run: its SYN adds its bit
 * to the entry. A close segment whose entry the sender's check read
 * (POLICY_RX_CLOSING) is followed on that copy, without a lookup.
 */
static __always_inline int policy_ingress(struct __sk_buff *skb, struct ipv4_info *info,
					  const struct endpoint_info *ep, __u8 from_host,
					  __u8 bpf_delivered)
{
	struct policy_tuple t = {.saddr = info->saddr, .daddr = info->daddr, .proto = info->proto};
	const struct policy_ct_entry *known = NULL;
	struct policy_ct_seen seen = {};

	if (info->policy_rx_tracked == POLICY_RX_TRACKED)
		return 0;
	t.flags = policy_ep_flags(ep, info->daddr);
	if (!(t.flags & POLICY_F_ISOLATED)) {
		policy_tx_commit(info);
		return 0;
	}
	t.from_host = from_host;
	policy_l4(skb, info, &t);
	if (info->policy_rx_tracked == POLICY_RX_CLOSING)
		known = &info->policy_ct;
	return policy_enforce(&t, info->daddr, POLICY_DIR_INGRESS,
			      bpf_delivered ? info->policy_tx_fresh : POLICY_CT_MERGE, known,
			      &seen);
}

/*
 * policy_egress_begin notes what the egress check needs from a pod's packet
 * before the Service stage may translate it: the pod's isolation state
 * (ep: its endpoint entry, or NULL), its own address and source port. It
 * returns 0 when the pod is not isolated (no egress check).
 */
static __always_inline int policy_egress_begin(struct __sk_buff *skb, const struct ipv4_info *info,
					       const struct endpoint_info *ep,
					       struct policy_tuple *t)
{
	struct policy_l4_hdr h = {};

	t->flags = policy_ep_flags(ep, info->saddr);
	if (!(t->flags & POLICY_F_ISOLATED))
		return 0;
	t->saddr = info->saddr;
	if (info->l4_off && (info->proto == IPPROTO_TCP || info->proto == IPPROTO_UDP ||
			     info->proto == IPPROTO_SCTP))
		policy_l4_load(skb, info, &h, 4);
	t->sport = h.sport;
	return 1;
}

/*
 * policy_egress is the egress check after the Service stage: the pod's own
 * source (noted by policy_egress_begin) towards the translated destination
 * (a Service's backend). 0 to go on, or the drop reason. When the packet
 * still carries that source and its connection is tracked at the other end
 * as well (both pods of this node), info->policy_rx_tracked tells the
 * ingress check of this same packet (endpoint_deliver) to pass it without
 * a second lookup of the same entry; a segment of the connection's close,
 * which the ingress check follows (policy_enforce), gets the entry as read
 * here (info->policy_ct) instead of that lookup. A SYN it allows is not
 * written here: info->policy_tx_fresh hands its end bit on, so the
 * receiver's check writes the entry once, whole, with both bits
 * (policy_ct_track), and where no such check runs the caller writes it
 * (policy_tx_commit). Only a packet whose source the Service stage left
 * alone defers (the receiver's check then sees the same tuple).
 */
static __always_inline int policy_egress(struct __sk_buff *skb, struct ipv4_info *info,
					 struct policy_tuple *t)
{
	struct policy_tuple now = {};
	struct policy_ct_seen seen = {};
	__u32 rx_bit;
	int reason, same;

	policy_l4(skb, info, &now);
	t->daddr = info->daddr;
	t->proto = info->proto;
	t->dport = now.dport;
	t->syn = now.syn;
	t->tcp_flags = now.tcp_flags;
	t->ack = now.ack;
	t->fin_end = now.fin_end;
	same = t->saddr != t->daddr && t->saddr == info->saddr && t->sport == now.sport;
	reason = policy_enforce(t, t->saddr, POLICY_DIR_EGRESS, same ? POLICY_CT_DEFER : 0, NULL,
				&seen);
	if (reason || !same)
		return reason;
	info->policy_tx_fresh = seen.fresh;
	info->policy_tx_sport = t->sport;
	info->policy_tx_dport = t->dport;
	rx_bit = t->saddr < t->daddr ? POLICY_CT_END_HI : POLICY_CT_END_LO;
	if (!(seen.ends & rx_bit))
		return 0;
	info->policy_rx_tracked = seen.closing ? POLICY_RX_CLOSING : POLICY_RX_TRACKED;
	if (seen.closing)
		info->policy_ct = seen.entry;
	return 0;
}

#endif /* MYELIN_LIB_POLICY_H */
