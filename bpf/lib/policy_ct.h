/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy's connection tracking (lib/policy.h, docs/policy.md): one
 * myelin_policy_ct entry per connection an isolated pod of this node
 * accepted, shared by both directions and both ends, noted when a check
 * allows a packet and deleted once both FINs of a TCP connection are
 * acknowledged. What has no such end is deleted by the agent
 * (datapath.GCPolicyCT): a connection of another protocol idle past its
 * timeout, a TCP connection still marked reset after a grace period.
 */
#ifndef MYELIN_LIB_POLICY_CT_H
#define MYELIN_LIB_POLICY_CT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
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
 * policy_ct_sender_checked says whether what the stack delivers (t at an
 * ingress check) comes from a pod of this node through its own veth, which
 * myelin_from_pod checked it on: its source address is that pod's and it
 * entered the node on the pod's host-side veth (in_ifindex). One endpoint
 * lookup, made only where a packet creates an entry (policy_ct_opener).
 */
static __always_inline int policy_ct_sender_checked(const struct policy_tuple *t)
{
	const struct endpoint_info *ep;
	__u32 saddr = t->saddr;

	if (!t->in_ifindex)
		return 0;
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
 * node checked) or of what the stack delivers from a pod of this node
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

/* POLICY_CT_TIME_SHIFT: policy_ct_now counts units of 2^30 ns (~1.07 s). */
#define POLICY_CT_TIME_SHIFT 30

/*
 * policy_ct_now is the time kept as a non-TCP entry's last seen (fin_lo):
 * the flow tables' clock (lib/clock.h), which the agent reads too, in ~1 s
 * units.
 */
static __always_inline __u32 policy_ct_now(void)
{
	return (__u32)(clock_coarse_ns() >> POLICY_CT_TIME_SHIFT);
}

/*
 * The table (maps.h myelin_policy_ct): an array of slots in buckets of
 * POLICY_CT_WAYS, a connection's two buckets a hash of its key under the
 * agent's random policy_ct_seed (so a pod can't choose tuples that share
 * another connection's buckets and push it out). A slot is written whole
 * under its sequence count (struct policy_ct_slot): a writer takes it by
 * moving an even count to odd with a compare-and-swap (another writer at
 * it: the write is given up, as if evicted: that connection's next packet
 * is judged again), writes, and moves it on to even. A reader copies the slot between two reads
 * of the count and takes a change or an odd count as a miss, which is judged
 * by the policy again and never allows by itself. The reads rely on loads not
 * being reordered with loads (x86; another architecture would need
 * load-acquire); the writer's atomics order its stores.
 * The close state (policy_ct_close), a non-TCP entry's last seen
 * (policy_ct_refresh) and a slot's in-use mark are written in place without
 * the count: a reader sees the old or the new value of each, and none
 * touches the ends.
 */
/* policy_ct_seed: the key of the bucket hash; the agent picks it at random
 * and keeps it with the table (datapath.Load). */
volatile const __u64 policy_ct_seed = 0;

/* policy_ct_buckets: myelin_policy_ct's buckets (datapath.Load sets the table's size). */
volatile const __u32 policy_ct_buckets = POLICY_CT_MAX / POLICY_CT_WAYS;

#define POLICY_CT_MUL 0x9e3779b97f4a7c15ULL

/* policy_ct_read32 reads a slot word once, as it is in memory now. */
#define policy_ct_read32(p) (*(volatile __u32 *)(p))

/*
 * policy_ct_buckets_of sets the indexes of k's two buckets: a connection
 * lives in the first unless it was full when the connection was written
 * (policy_ct_put), so a lookup of a sparse table reads one bucket, and a
 * bucket overflows only when both are full.
 */
static __always_inline void policy_ct_buckets_of(const struct policy_ct_key *k, __u32 *first,
						 __u32 *second)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = policy_ct_seed;

	h = (h ^ w[0]) * POLICY_CT_MUL;
	h = (h ^ w[1]) * POLICY_CT_MUL;
	h = (h ^ w[2]) * POLICY_CT_MUL;
	h = (h ^ w[3]) * POLICY_CT_MUL;
	*first = ((h & 0xffffffff) * policy_ct_buckets) >> 32;
	*second = ((h >> 32) * policy_ct_buckets) >> 32;
}

/* policy_ct_key_is says whether slot key a is k (word by word: k is on the stack). */
static __always_inline int policy_ct_key_is(const struct policy_ct_key *a,
					    const struct policy_ct_key *k)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)k;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/*
 * policy_ct_find_at looks connection k up: the index of its slot (bucket *
 * POLICY_CT_WAYS + way), with a whole copy of its entry in *out (out NULL:
 * the slot only, for the in-place writes), or -1 (not tracked, or a writer
 * was at its slot). A slot found is marked in use (policy_ct_put). A global
 * function: the verifier checks it once, not at every call with every
 * caller's state.
 */
__noinline int policy_ct_find_at(const struct policy_ct_key *k, struct policy_ct_entry *out)
{
	__u32 i[2];

	if (!k)
		return -1;
	policy_ct_buckets_of(k, &i[0], &i[1]);
	for (int c = 0; c < 2; c++) {
		struct policy_ct_bucket *b = bpf_map_lookup_elem(&myelin_policy_ct, &i[c]);

		if (!b)
			return -1;
		for (__u32 w = 0; w < POLICY_CT_WAYS; w++) {
			struct policy_ct_slot *s = &b->way[w];
			__u32 seq = policy_ct_read32(&s->seq);

			if (!policy_ct_key_is(&s->key, k))
				continue;
			/* In use and seen (enum policy_ct_ref), in place like the close
			 * state: written once per bucket eviction or GC round, atomically,
			 * so the agent's bits of ref stay as the agent left them. */
			if ((s->ref & (POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN)) !=
			    (POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN))
				__sync_fetch_and_or(&s->ref,
						    POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN);
			if (out) {
				*out = s->entry;
				asm volatile("" ::: "memory"); /* the copy before the second read */
				if ((seq & 1) || policy_ct_read32(&s->seq) != seq)
					return -1;
			}
			return i[c] * POLICY_CT_WAYS + w;
		}
		if (i[1] == i[0])
			break;
	}
	return -1;
}

/* policy_ct_find is policy_ct_find_at's slot: NULL when it found none. Not
 * inlined: its lookup key would add to its callers' stack frames, and
 * myelin_from_pod's deepest chain is at the limit (docs/datapath.md). */
static __noinline struct policy_ct_slot *policy_ct_find(const struct policy_ct_key *k,
							struct policy_ct_entry *out)
{
	int at = policy_ct_find_at(k, out);
	__u32 i = (__u32)at / POLICY_CT_WAYS;
	struct policy_ct_bucket *b;

	if (at < 0)
		return NULL;
	b = bpf_map_lookup_elem(&myelin_policy_ct, &i);
	return b ? &b->way[at & (POLICY_CT_WAYS - 1)] : NULL;
}

/*
 * policy_ct_write writes slot s whole (k and ce, or empty for k NULL) if its
 * count is still seq, and says whether it did; another writer got there
 * first: the write is given up.
 */
static __always_inline int policy_ct_write(struct policy_ct_slot *s, __u32 seq,
					   const struct policy_ct_key *k,
					   const struct policy_ct_entry *ce)
{
	if ((seq & 1) || __sync_val_compare_and_swap(&s->seq, seq, seq + 1) != seq)
		return 0;
	if (k) {
		s->key = *k;
		s->entry = *ce;
		s->born = policy_ct_now();
		s->ref = 0;
	} else {
		__builtin_memset(&s->key, 0, sizeof(s->key));
		__builtin_memset(&s->entry, 0, sizeof(s->entry));
	}
	__sync_fetch_and_add(&s->seq, 1);
	return 1;
}

/*
 * policy_ct_put writes connection k's entry ce: into its slot, else an empty
 * one of its first bucket, else of its second, else the oldest slot of the
 * two that holds no end's bit (an opener kept alone after a purge or an RST:
 * it allows nothing), else the oldest no lookup found since they last made
 * room (policy_ct_find_at marks them), else the oldest. A second chance, as
 * the kernel's LRU lists give: a connection in use keeps its slot over one
 * that saw no packet since (a flood's one-off datagrams). Oldest is by born,
 * which the agent's GC rounds move on while a connection carries traffic (a
 * born ahead of this clock, written by an agent whose clock read a tick
 * later, is age 0). A connection replaced, once written, is counted in
 * myelin_policy_ct_stats (an opener alone is none). was: the ends of the copy
 * of k's entry that ce adds to (0: ce is whole by itself); the write is given
 * up when k's entry holds other ends now or is gone, as when another writer
 * is at the slot: the agent's purge took an end away since the caller's
 * lookup (the copy would bring that end's allow back), or another check
 * wrote it. The next packet is judged again. A global function: the verifier
 * checks it once, not at every call with every caller's state.
 */
__noinline int policy_ct_put(const struct policy_ct_key *k, const struct policy_ct_entry *ce,
			     __u32 was)
{
	__u32 pick_seq = 0, pick_age = 0, now = policy_ct_now(), i[2], score;
	struct policy_ct_bucket *b[2] = {};
	struct policy_ct_slot *pick = NULL;
	/* of pick: 0 k's own, 1 empty, 2 no end left, 3 unreferenced, 4 referenced */
	int rank = 5;
	__u64 *stat;

	if (!k || !ce)
		return 0;
	policy_ct_buckets_of(k, &i[0], &i[1]);
	for (int c = 0; c < 2 && rank; c++) {
		b[c] = bpf_map_lookup_elem(&myelin_policy_ct, &i[c]);
		if (!b[c])
			return 0;
		for (__u32 w = 0; w < POLICY_CT_WAYS; w++) {
			struct policy_ct_slot *s = &b[c]->way[w];
			__u32 seq = policy_ct_read32(&s->seq), age;

			if (policy_ct_key_is(&s->key, k)) {
				if (was && policy_ct_read32(&s->entry.ends) != was)
					return 0;
				pick = s, pick_seq = seq, rank = 0;
				break;
			}
			if (!s->key.proto) {
				if (rank > 1)
					pick = s, pick_seq = seq, rank = 1;
				continue;
			}
			age = (__s32)(now - s->born) > 0 ? now - s->born : 0;
			if (!(s->entry.ends & (POLICY_CT_END_LO | POLICY_CT_END_HI)))
				score = 2; /* an opener alone: allows nothing */
			else
				score = (s->ref & POLICY_CT_REF_IN_USE) ? 4 : 3;
			if (rank > score || (rank == score && age > pick_age))
				pick = s, pick_seq = seq, pick_age = age, rank = score;
		}
		if (i[1] == i[0])
			break;
	}
	if (!pick || (was && rank))
		return 0;
	if (!policy_ct_write(pick, pick_seq, k, ce) || rank < 3)
		return 0;
	/* Every slot referenced: the oldest went, the others lose their in-use
	 * mark, so the next connection here replaces one that saw no packet
	 * since. */
	if (rank == 4)
		for (int c = 0; c < 2; c++)
			for (__u32 w = 0; w < POLICY_CT_WAYS && b[c]; w++)
				__sync_fetch_and_and(&b[c]->way[w].ref, ~POLICY_CT_REF_IN_USE);
	/* A connection pushed out: counted (the agent's status warns of live
	 * ones). i[0] is done with: its stack slot is the key. */
	i[0] = rank == 4 ? POLICY_CT_STAT_EVICTED_IN_USE : POLICY_CT_STAT_EVICTED_IDLE;
	stat = bpf_map_lookup_elem(&myelin_policy_ct_stats, &i[0]);
	if (stat)
		*stat += 1; /* per CPU: no other writer */
	return 0;
}

/* policy_ct_del empties connection k's slot s (nothing if it holds another since). */
static __always_inline void policy_ct_del(struct policy_ct_slot *s, const struct policy_ct_key *k)
{
	__u32 seq = policy_ct_read32(&s->seq);

	asm volatile("" ::: "memory"); /* the key read after the count */
	if (policy_ct_key_is(&s->key, k))
		policy_ct_write(s, seq, NULL, NULL);
}

/*
 * policy_ct_refresh notes that a tracked packet of a connection without
 * close tracking (not TCP) passed: its entry's last seen, written only when
 * it changes (at most once a second per connection), in place through the
 * looked-up slot at (NULL: nothing to refresh) like policy_ct_close's
 * close state: a slot emptied and reused for another connection meanwhile
 * only gets a later time (or, for TCP, a wrong FIN number, which can only
 * delete its entry early or leave it to be replaced); no end's bit is
 * touched.
 */
static __always_inline void policy_ct_refresh(struct policy_ct_slot *at, __u32 seen)
{
	__u32 now = policy_ct_now();

	if (at && seen != now)
		at->entry.fin_lo = now;
}

/*
 * policy_ct_any_over is set by the agent while myelin_policy_ct_over lists a
 * pod (datapath.GCPolicyCT; .bss: a runtime switch), so a new connection
 * costs one load, not a hash lookup, while no pod is over its budget.
 */
volatile __u32 policy_ct_any_over = 0;

/*
 * policy_ct_over_budget says whether a new entry paid for by pod addr may not
 * be written: addr held more than its budget at the agent's last count
 * (datapath.GCPolicyCT). The payer is the entry's opener when policy_ct_opener
 * names one (a pod of this node), else the local pod of the check. Only a
 * connection that would create an entry asks (no lookup for a tracked one),
 * it looks the list up only while the list has a pod, and with
 * policy_ct_budget off nothing is asked.
 */
static __always_inline int policy_ct_over_budget(__u32 addr)
{
	return policy_ct_budget && policy_ct_any_over &&
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
 * A write that adds to a copy happens only if the entry still holds the
 * copy's ends (policy_ct_put's was): an end the agent purged meanwhile stays
 * purged. Entries are only ever written whole, by policy_ct_put under the
 * slot's count, never through a looked-up slot: one that another CPU emptied
 * meanwhile may already hold another connection, and a write through it
 * would give that connection an end it never accepted (policy_ct_close's
 * close state is the exception that matters: it can only lead to a
 * deletion).
 */
static __always_inline void policy_ct_track(const struct policy_ct_key *k,
					    const struct policy_ct_entry *cur, __u32 bit,
					    __u32 also, int fresh, int syn)
{
	struct policy_ct_entry ce = {.ends = bit | also};
	__u32 was = 0;

	if (!fresh) {
		if (!cur)
			cur = policy_ct_find(k, &ce) ? &ce : NULL;
		else
			ce = *cur;
		if (cur) {
			was = ce.ends;
			if ((ce.ends & bit) && !(syn && ce.closing))
				return;
			ce.ends |= bit;
			if (syn)
				ce.closing = 0;
			if (syn && also) {
				ce.ends &= ~(POLICY_CT_OPENED_LO | POLICY_CT_OPENED_HI);
				ce.ends |= also;
			}
		} else {
			ce = (struct policy_ct_entry){.ends = bit | also};
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
 * written whole): a slot emptied and reused for another connection
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
	/* A SYN of a pod of this node, which its egress check saw: the pod opened it. */
	ce.ends |= policy_ct_opener(policy_ct_key_of(&k, &t, POLICY_DIR_EGRESS), POLICY_DIR_EGRESS,
				    &t);
	policy_ct_put(&k, &ce, 0);
	info->policy_tx_fresh = 0;
}

#endif /* MYELIN_LIB_POLICY_CT_H */
