/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy's connection tracking (lib/policy.h, docs/policy.md): one
 * myelin_policy_ct entry per connection an isolated pod of this node
 * accepted, shared by both directions and both ends, noted when a check
 * allows a packet and deleted once both FINs of a TCP connection are
 * acknowledged. What has no such end is deleted by the agent
 * (datapath.GCPolicyCT): a connection of another protocol idle past its
 * timeout, a TCP connection still marked reset after a grace period. This
 * file says what an entry means (its ends, its opener, its close); the
 * table that holds entries is lib/policy_ct_table.h.
 */
#ifndef MYELIN_LIB_POLICY_CT_H
#define MYELIN_LIB_POLICY_CT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
#include "ipv4.h"
#include "l4.h"
#include "budget.h"
#include "maps.h"
#include "policy_ct_write.h"
#include "policy_l4.h"

/*
 * policy_ct_key_set fills the tracking key of a packet from saddr:sport to
 * daddr:dport (its lower address and port end first, so both directions
 * share it) and returns the bit of the local end: the source where
 * local_src, else the destination.
 */
static __always_inline __u32 policy_ct_key_set(struct policy_ct_key *k, __u32 saddr, __u32 daddr,
					       __be16 sport, __be16 dport, __u8 proto,
					       int local_src)
{
	int src_lo = saddr < daddr || (saddr == daddr && sport <= dport);

	k->addr_lo = src_lo ? saddr : daddr;
	k->addr_hi = src_lo ? daddr : saddr;
	k->port_lo = src_lo ? sport : dport;
	k->port_hi = src_lo ? dport : sport;
	k->proto = proto;
	return src_lo == local_src ? POLICY_CT_END_LO : POLICY_CT_END_HI;
}

/* policy_ct_key_of is policy_ct_key_set for tuple t at its check of direction dir. */
static __always_inline __u32 policy_ct_key_of(struct policy_ct_key *k, const struct policy_tuple *t,
					      __u8 dir)
{
	return policy_ct_key_set(k, t->saddr, t->daddr, t->sport, t->dport, t->proto,
				 dir == POLICY_DIR_EGRESS);
}

/*
 * policy_ct_sender_checked says whether what the stack delivers (t at an
 * ingress check) comes from a pod whose source a node checked: a pod of this
 * node through its own veth, which myelin_from_pod checked it on (its source
 * address is that pod's and it entered the node on the pod's host-side veth,
 * in_ifindex), or in tunnel mode a pod of another node through myelin_vxlan,
 * whose myelin_from_overlay let an address of the cluster CIDR in only from
 * the node owning its PodCIDR (tunnel_peer_check; endpoint_vouched says the
 * same of what BPF delivers from there). One endpoint lookup for a packet
 * from a veth, made only where a packet creates an entry (policy_ct_opener).
 */
static __always_inline int policy_ct_sender_checked(const struct policy_tuple *t)
{
	const struct endpoint_info *ep;
	__u32 saddr = t->saddr;

	if (!t->in_ifindex)
		return 0;
	if (routing_tunnel && t->in_ifindex == overlay_ifindex)
		return cluster_cidr_mask && cluster_contains(saddr);
	ep = bpf_map_lookup_elem(&myelin_endpoints, &saddr);
	return ep && ep->ifindex == t->in_ifindex;
}

/*
 * policy_ct_opener is the opener's bit (enum policy_ct_ends) of an entry the
 * check of direction dir at the local end bit writes for tuple t, when the
 * packet's sender is a pod whose source address a node checked: the local end
 * at its egress check (myelin_from_pod checked it), the sender at an ingress
 * check of what BPF delivers from such a pod (t->vouched: endpoint_vouched; a
 * pod of this node, or in tunnel mode a pod of another node, which its own
 * node checked) or of what the stack delivers from such a pod
 * (policy_ct_sender_checked). Any packet that writes the entry names its
 * sender (a SYN, a first datagram, a bare segment of a flood: whoever makes
 * the entry pays for it; the other end's packet that writes it again after an
 * eviction names that end). 0 for any other sender (the node's own stack,
 * other nodes and the world, what native routing brings from the uplink,
 * which may carry any source address), and with source_verify off: such an
 * entry is counted against its local ends.
 */
static __always_inline __u32 policy_ct_opener(__u32 bit, __u8 dir, const struct policy_tuple *t)
{
	if (!source_verify)
		return 0;
	if (dir != POLICY_DIR_EGRESS) {
		if (!t->vouched && !policy_ct_sender_checked(t))
			return 0;
		bit ^= POLICY_CT_END_LO | POLICY_CT_END_HI;
	}
	return bit == POLICY_CT_END_LO ? POLICY_CT_OPENED_LO : POLICY_CT_OPENED_HI;
}

/*
 * policy_ct_via is the bit (enum policy_ct_ends) that says which check of end
 * bit set it: OUT for its egress check (dir), IN for its ingress check.
 */
static __always_inline __u32 policy_ct_via(__u32 bit, __u8 dir)
{
	if (dir == POLICY_DIR_EGRESS)
		return bit == POLICY_CT_END_LO ? POLICY_CT_OUT_LO : POLICY_CT_OUT_HI;
	return bit == POLICY_CT_END_LO ? POLICY_CT_IN_LO : POLICY_CT_IN_HI;
}

#define POLICY_CT_VIA_LO (POLICY_CT_OUT_LO | POLICY_CT_IN_LO)
#define POLICY_CT_VIA_HI (POLICY_CT_OUT_HI | POLICY_CT_IN_HI)

/*
 * policy_ct_over_budget says whether a new entry paid for by pod addr may not
 * be written: addr held more than its budget at the agent's last count
 * (datapath.GCPolicyCT). The payer is the entry's opener when policy_ct_opener
 * names one (a pod whose source a node checked), else the local pod of the
 * check. Only a connection that would create an entry asks (no lookup for a
 * tracked one), it looks the list up only while the list has a pod
 * (myelin_budgets), and with
 * policy_ct_budget off nothing is asked.
 */
static __always_inline int policy_ct_over_budget(__u32 addr)
{
	return policy_ct_budget && budget_any_over(BUDGET_POLICY_CT) &&
	       bpf_map_lookup_elem(&myelin_policy_ct_over, &addr);
}

/*
 * policy_ct_track notes that the local end (bit) accepted the connection of
 * k: its replies and later packets pass this end without a policy lookup.
 * also holds the packet's opener bit (policy_ct_opener) and, for a fresh
 * entry, the other end's bit when the egress check of this same packet, on
 * this node, allowed it and left the write to this check (a SYN between two
 * pods of the node). fresh: the packet is a SYN whose entry starts afresh,
 * holding this end's bit and also; no lookup first. Otherwise (a packet that
 * found no bit of this end, or a SYN the stack delivers) the end's bit is
 * added to what the entry holds (cur: the entry as the caller read it, or
 * NULL to look it up; a new entry gets also too); a SYN clears an old close
 * state and, when this check knows its sender (also), names it the opener.
 * via: the OUT or IN bits (policy_ct_via) of the ends this write sets,
 * written with them (an end's other one cleared), and POLICY_CT_HOST_PEER
 * when the host's exemption let the packet in (kept until a fresh entry).
 * A write that adds to a copy happens only if the entry still holds the
 * copy's ends (policy_ct_put's was): an end the agent purged meanwhile stays
 * purged; and it leaves a close state written meanwhile (a FIN or RST on
 * another CPU) as it is, so the close is still followed to the deletion.
 * A packet whose lookup found no entry writes one only if there is still
 * none (POLICY_CT_PUT_NEW): one another CPU was writing, which made the
 * lookup miss, keeps what it holds. Entries are only ever written by
 * policy_ct_put under the slot's count, never through a looked-up slot: one
 * that another CPU emptied meanwhile may already hold another connection,
 * and a write through it would give that connection an end it never
 * accepted (policy_ct_close's close state is the exception that matters: it
 * can only lead to a deletion).
 */
static __always_inline void policy_ct_track(const struct policy_ct_key *k,
					    const struct policy_ct_entry *cur, __u32 bit,
					    __u32 also, __u32 via, int fresh, int syn)
{
	struct policy_ct_entry ce = {.ends = bit | also | via};
	__u64 was = 0;

	if (!fresh) {
		if (!cur)
			cur = policy_ct_find(k, &ce) ? &ce : NULL;
		else
			ce = *cur;
		if (cur) {
			was = policy_ct_was(&ce);
			if ((ce.ends & bit) && !(syn && ce.closing))
				return;
			ce.ends &= ~(bit == POLICY_CT_END_LO ? POLICY_CT_VIA_LO : POLICY_CT_VIA_HI);
			ce.ends |= bit | via;
			if (syn)
				ce.closing = 0;
			if (syn && also) {
				ce.ends &= ~(POLICY_CT_OPENED_LO | POLICY_CT_OPENED_HI);
				ce.ends |= also;
			}
		} else {
			ce = (struct policy_ct_entry){.ends = bit | also | via};
			was = POLICY_CT_PUT_NEW;
		}
	}
	if (k->proto != IPPROTO_TCP)
		ce.fin_lo = policy_ct_now();
	policy_ct_put(k, &ce, was);
}

/*
 * policy_ct_close follows the close of a tracked TCP connection through the
 * packets of tuple t (src_lo: its sender is the lo end; cur: a copy of the
 * entry of k; at: the entry in the map as the caller looked it up, or NULL
 * to look it up here): a FIN notes which acknowledgment number covers it,
 * an ACK from the other end that reaches that number marks it acknowledged,
 * and once both FINs are, the entry is deleted. Only the last check of a
 * packet on this node calls it, so the packet itself never needs the entry
 * again; a FIN retransmitted because the last ACK was lost is judged by the
 * policy like any untracked packet. It only ever deletes: a packet it sees
 * can make no end pass.
 * The close state is written in place (an atomic OR of its bits, the FIN's
 * number), not whole under the slot's count, which would cost two more
 * atomics for each of a connection's close segments. It is written through
 * the looked-up slot (policy_ct_track says why entries are otherwise only
 * written under the count): a slot emptied and reused for another connection
 * meanwhile gets close bits it never saw, which can only delete that
 * connection's entry early, after which its packets are judged by the
 * policy again; no write here touches the ends that let packets pass.
 * An RST marks the entry reset (the agent deletes it if the mark stays, see
 * enum policy_ct_closing); any other segment of the connection takes the
 * mark away again.
 */
static __always_inline void policy_ct_close(const struct policy_ct_key *k,
					    const struct policy_ct_entry *cur,
					    struct policy_ct_slot *at, const struct policy_tuple *t,
					    int src_lo)
{
	__u32 fin = src_lo ? POLICY_CT_FIN_LO : POLICY_CT_FIN_HI;
	__u32 closing = cur->closing, add = 0, clear = 0;

	/* An end's first FIN is noted once: its retransmissions cover the same
	 * number, and a later FIN with another (forged) number can't move it. */
	if ((t->tcp_flags & POLICY_TCP_FIN) && !(closing & fin))
		add |= fin;
	if (t->tcp_flags & POLICY_TCP_RST)
		add |= POLICY_CT_RESET;
	else if (closing & POLICY_CT_RESET)
		clear = POLICY_CT_RESET;
	if (t->tcp_flags & TCP_FLAGS_ACK) {
		if (!src_lo && (closing & POLICY_CT_FIN_LO) && (__s32)(t->ack - cur->fin_lo) >= 0)
			add |= POLICY_CT_ACKED_LO;
		if (src_lo && (closing & POLICY_CT_FIN_HI) && (__s32)(t->ack - cur->fin_hi) >= 0)
			add |= POLICY_CT_ACKED_HI;
	}
	add &= ~closing;
	if (!add && !clear)
		return;
	if (!at)
		at = policy_ct_find(k, NULL);
	if (!at)
		return; /* deleted meanwhile: it stays deleted */
	if (clear)
		__sync_fetch_and_and(&at->entry.closing, ~clear);
	if (!add)
		return;
	if (add & fin) { /* the number first, then the bit that says it is there */
		if (src_lo)
			at->entry.fin_lo = t->fin_end;
		else
			at->entry.fin_hi = t->fin_end;
	}
	closing = __sync_fetch_and_or(&at->entry.closing, add) | add;
	if ((closing & (POLICY_CT_ACKED_LO | POLICY_CT_ACKED_HI)) ==
	    (POLICY_CT_ACKED_LO | POLICY_CT_ACKED_HI))
		policy_ct_del(at, k);
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
	if (info->proto != IPPROTO_TCP)
		ce.fin_lo = policy_ct_now();
	/* A SYN of a pod of this node, which its egress check saw (and accepted:
	 * OUT): the pod opened it. */
	ce.ends |= policy_ct_via(info->policy_tx_fresh, POLICY_DIR_EGRESS) |
		   policy_ct_opener(policy_ct_key_of(&k, &t, POLICY_DIR_EGRESS), POLICY_DIR_EGRESS,
				    &t);
	policy_ct_put(&k, &ce, 0);
	info->policy_tx_fresh = 0;
}

#endif /* MYELIN_LIB_POLICY_CT_H */
