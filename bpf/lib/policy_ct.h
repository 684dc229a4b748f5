/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy's connection tracking (lib/policy.h, docs/policy.md): one
 * myelin_policy_ct entry per connection an isolated pod of this node
 * accepted, shared by both directions and both ends, noted when a check
 * allows a packet and deleted once both FINs of a TCP connection are
 * acknowledged.
 */
#ifndef MYELIN_LIB_POLICY_CT_H
#define MYELIN_LIB_POLICY_CT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "policy_l4.h"

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

#endif /* MYELIN_LIB_POLICY_CT_H */
