/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The write side of myelin_policy_ct (the table's layout, hashes and lookups
 * are lib/policy_ct_table.h): a slot written under its sequence count, the
 * choice of a slot for a new connection (policy_ct_put), its deletion and the
 * in-place refresh of a non-TCP entry's last seen.
 */
#ifndef MYELIN_LIB_POLICY_CT_WRITE_H
#define MYELIN_LIB_POLICY_CT_WRITE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "policy_ct_table.h"

/*
 * policy_ct_write writes slot s (k and ce, or empty for k NULL) if its count
 * is still seq, and says whether it did; another writer got there first: the
 * write is given up. was: 0, or the copy of the entry k's slot s holds that
 * ce adds to (policy_ct_was): then only the ends (and a non-TCP entry's last
 * seen) are written, the key stays, and born and ref start again as for any
 * write (the agent's notes in ref go: a new end accepted the connection
 * since). The close state is written in place without the count
 * (policy_ct_close), so a close segment on another CPU since the copy was
 * read would be undone by writing the copy's: ce's goes in only where it
 * differs from the copy's (a SYN clearing an old close) and the slot still
 * holds the copy's, else the slot's stays, and a TCP entry's FIN numbers,
 * which only change with it, are left as they are.
 */
static __always_inline int policy_ct_write(struct policy_ct_slot *s, __u32 seq,
					   const struct policy_ct_key *k,
					   const struct policy_ct_entry *ce, __u64 was)
{
	if ((seq & 1) || __sync_val_compare_and_swap(&s->seq, seq, seq + 1) != seq)
		return 0;
	if (k && was) {
		__u32 was_closing = was >> 32;

		s->entry.ends = ce->ends;
		if (k->proto != IPPROTO_TCP)
			s->entry.fin_lo = ce->fin_lo;
		if (ce->closing != was_closing)
			__sync_val_compare_and_swap(&s->entry.closing, was_closing, ce->closing);
		s->born = policy_ct_now();
		s->ref = 0;
	} else if (k) {
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

/* POLICY_CT_PUT_NEW is policy_ct_put's was for an entry the caller's lookup
 * did not find: its ends (the low word) are 0, which no tracked entry's are. */
#define POLICY_CT_PUT_NEW (1ULL << 63)

/* policy_ct_was is policy_ct_put's was for a copy ce of an entry: its ends
 * and close state, never 0 (a tracked entry holds an end's or an opener's bit). */
static __always_inline __u64 policy_ct_was(const struct policy_ct_entry *ce)
{
	return ce->ends | (__u64)ce->closing << 32;
}

/* policy_ct_pick_rank: how good policy_ct_put's pick of a slot is, best first. */
enum policy_ct_pick_rank {
	POLICY_CT_PICK_OWN,    /* k's own slot */
	POLICY_CT_PICK_EMPTY,  /* an empty one */
	POLICY_CT_PICK_OPENER, /* one whose entry holds no end's bit */
	POLICY_CT_PICK_IDLE,   /* one no lookup found since its buckets made room */
	POLICY_CT_PICK_IN_USE, /* the oldest of the rest */
	POLICY_CT_PICK_NONE,   /* none yet */
};

/* policy_ct_pick is policy_ct_put's pick of a slot so far: its index (bucket
 * * POLICY_CT_WAYS + way), count when read, age (of an entry to push out)
 * and rank, and the time of the write. */
struct policy_ct_pick {
	__u32 at;
	__u32 seq;
	__u32 age;
	__u32 rank;
	__u32 now;
};

/*
 * policy_ct_scan reads bucket i for policy_ct_put's pick p of a slot for
 * connection k: k's own (and no other bucket needs reading), else the first
 * empty one, else, where evict (one of k's own buckets), the better
 * of p and this bucket's best connection to push out (policy_ct_put says which). -1: the write is
 * given up, k's entry holds what was says it does not (policy_ct_put). A global function: the
 * verifier checks it once, not in every state of its caller's loop.
 */
__noinline int policy_ct_scan(const struct policy_ct_key *k, __u32 i, int evict, __u64 was,
			      struct policy_ct_pick *p)
{
	struct policy_ct_bucket *b;
	__u32 score;

	if (!k || !p)
		return -1;
	b = bpf_map_lookup_elem(&myelin_policy_ct, &i);
	if (!b)
		return -1;
	for (__u32 w = 0; w < POLICY_CT_WAYS; w++) {
		struct policy_ct_slot *s = &b->way[w];
		__u32 seq = policy_ct_read32(&s->seq), age;

		asm volatile("" ::: "memory"); /* the key read after the count */
		if (policy_ct_key_is(&s->key, k)) {
			if (was == POLICY_CT_PUT_NEW ||
			    (was && policy_ct_read32(&s->entry.ends) != (__u32)was))
				return -1;
			p->at = i * POLICY_CT_WAYS + w, p->seq = seq, p->rank = POLICY_CT_PICK_OWN;
			return 0;
		}
		if (!s->key.proto) {
			if (p->rank > POLICY_CT_PICK_EMPTY)
				p->at = i * POLICY_CT_WAYS + w, p->seq = seq,
				p->rank = POLICY_CT_PICK_EMPTY;
			continue;
		}
		if (!evict)
			continue;
		age = (__s32)(p->now - s->born) > 0 ? p->now - s->born : 0;
		if (!(s->entry.ends & (POLICY_CT_END_LO | POLICY_CT_END_HI)))
			score = POLICY_CT_PICK_OPENER; /* allows nothing */
		else if (s->ref & POLICY_CT_REF_IN_USE)
			score = POLICY_CT_PICK_IN_USE;
		else
			score = POLICY_CT_PICK_IDLE;
		if (p->rank > score || (p->rank == score && age > p->age))
			p->at = i * POLICY_CT_WAYS + w, p->seq = seq, p->age = age, p->rank = score;
	}
	return 0;
}

/*
 * policy_ct_claim writes connection k's entry ce into policy_ct_put's pick p
 * (was: policy_ct_put's, for k's own slot) and says whether it did. Another
 * writer at an empty slot picked (a connection of the same pair written at
 * the same time on another CPU): the next empty slot of that bucket, unless
 * the other wrote k. Not the whole scan again: that would take more of
 * policy_ct_put's frame than the deepest chain through it has left.
 */
static __always_inline int policy_ct_claim(const struct policy_ct_key *k,
					   const struct policy_ct_entry *ce, __u64 was,
					   const struct policy_ct_pick *p)
{
	struct policy_ct_bucket *b;
	__u32 i;

	i = p->at / POLICY_CT_WAYS;
	b = bpf_map_lookup_elem(&myelin_policy_ct, &i);
	if (!b)
		return 0;
	if (policy_ct_write(&b->way[p->at & (POLICY_CT_WAYS - 1)], p->seq, k, ce,
			    p->rank == POLICY_CT_PICK_OWN ? was : 0))
		return 1;
	if (p->rank != POLICY_CT_PICK_EMPTY)
		return 0;
	for (__u32 n = 1; n < POLICY_CT_WAYS; n++) {
		struct policy_ct_slot *s = &b->way[(p->at + n) & (POLICY_CT_WAYS - 1)];
		__u32 seq = policy_ct_read32(&s->seq);

		asm volatile("" ::: "memory"); /* the key read after the count */
		if (policy_ct_key_is(&s->key, k))
			return 0;
		if (!s->key.proto && policy_ct_write(s, seq, k, ce, 0))
			return 1;
	}
	return 0;
}

/*
 * policy_ct_put writes connection k's entry ce: into its slot, else an empty
 * one of its buckets (its pair's first: policy_ct_buckets_of), else, in its
 * own two buckets, the oldest slot that holds no end's bit (an opener kept
 * alone after a purge or an RST: it allows nothing), else the oldest no
 * lookup found since they last made room (policy_ct_find_at marks them), else
 * the oldest. A second chance, as the kernel's LRU lists give: a connection
 * in use keeps its slot over one that saw no packet since (a flood's one-off
 * datagrams). The pair's bucket only gives room, unless it is also one of
 * the new connection's own two (a chance of 2 in policy_ct_buckets): a
 * connection is pushed out of it only by one whose own bucket it is.
 * Oldest is by born, which the agent's GC rounds move on while a connection
 * carries traffic (a born ahead of this clock, written by an agent whose
 * clock read a tick later, is age 0). A connection replaced, once written, is
 * counted in myelin_policy_ct_stats (an opener alone is none). was: the copy
 * of k's entry that ce adds to (policy_ct_was; 0: ce is whole by itself, a
 * fresh SYN's; POLICY_CT_PUT_NEW: the caller's lookup found no entry); the
 * write is given up when k's entry holds other ends now or is gone (for NEW:
 * when k has an entry now), as when another writer is at the slot: the
 * agent's purge took an end away since the caller's lookup (the copy would
 * bring that end's allow back), or another check wrote it (or was writing it,
 * which made the lookup miss: its ends, opener and close state stay). The
 * next packet is judged again. The copy's close state gives way to the slot's
 * (policy_ct_write). A fresh entry takes the first empty slot without reading
 * the buckets behind it (the pair's bucket alone, for most connections: no
 * cache miss): an older entry of its tuple there (a connection left without
 * its close, whose tuple a SYN reuses) is behind it in every lookup, and the
 * agent's next GC round empties it (GCPolicyCT); if the fresh one is deleted
 * first (its connection closed within the round), the older one is the
 * tuple's entry again until it idles out, as any entry. Another writer at an
 * empty slot it picked: the next empty one (policy_ct_claim). A global
 * function: the verifier checks it once, not at every call with every
 * caller's state.
 */
__noinline int policy_ct_put(const struct policy_ct_key *k, const struct policy_ct_entry *ce,
			     __u64 was)
{
	struct policy_ct_pick p = {.rank = POLICY_CT_PICK_NONE, .now = policy_ct_now()};
	__u32 i[POLICY_CT_CANDIDATES];
	__u64 *stat;

	if (!k || !ce)
		return 0;
	policy_ct_buckets_of(k, i);
	for (int c = 0; c < POLICY_CT_CANDIDATES; c++) {
		if (!policy_ct_candidate(i, c))
			continue;
		if (p.rank == POLICY_CT_PICK_EMPTY && !was)
			break;
		if (policy_ct_scan(k, i[c], policy_ct_evicts(i, c), was, &p) < 0)
			return 0;
		if (p.rank == POLICY_CT_PICK_OWN)
			break;
	}
	if (p.rank == POLICY_CT_PICK_NONE ||
	    (was && was != POLICY_CT_PUT_NEW && p.rank != POLICY_CT_PICK_OWN))
		return 0;
	if (!policy_ct_claim(k, ce, was, &p) || p.rank < POLICY_CT_PICK_IDLE)
		return 0;
	/* Every slot referenced: the oldest went, the others it was chosen from
	 * lose their in-use mark, so the next connection here replaces one that
	 * saw no packet since. */
	if (p.rank == POLICY_CT_PICK_IN_USE)
		for (int c = 0; c < POLICY_CT_CANDIDATES; c++) {
			struct policy_ct_bucket *b;

			if (!policy_ct_candidate(i, c) || !policy_ct_evicts(i, c))
				continue;
			b = bpf_map_lookup_elem(&myelin_policy_ct, &i[c]);
			for (__u32 w = 0; w < POLICY_CT_WAYS && b; w++)
				__sync_fetch_and_and(&b->way[w].ref, ~POLICY_CT_REF_IN_USE);
		}
	/* A connection pushed out: counted (the agent's status warns of live
	 * ones). i[0] is done with: its stack slot is the key. */
	i[0] = p.rank == POLICY_CT_PICK_IN_USE ? POLICY_CT_STAT_EVICTED_IN_USE
					       : POLICY_CT_STAT_EVICTED_IDLE;
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
		policy_ct_write(s, seq, NULL, NULL, 0);
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

#endif /* MYELIN_LIB_POLICY_CT_WRITE_H */
