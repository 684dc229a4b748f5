/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The table of NetworkPolicy's tracked connections (maps.h myelin_policy_ct;
 * what an entry means is lib/policy_ct.h): buckets of slots each written
 * under its sequence count, looked up, written, deleted and refreshed here.
 * The agent walks the same table (internal/datapath/policyct_table.go).
 */
#ifndef MYELIN_LIB_POLICY_CT_TABLE_H
#define MYELIN_LIB_POLICY_CT_TABLE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
#include "maps.h"

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
 * POLICY_CT_WAYS. A connection has three candidate buckets, hashes under the
 * agent's random policy_ct_seed (so a pod can't choose tuples that share
 * another connection's buckets and push it out): its pair's bucket, a hash of
 * its two addresses alone, which all connections between the same two
 * addresses share, and two of the whole key (policy_ct_buckets_of). A slot
 * is written under its sequence count (struct policy_ct_slot): a writer takes
 * it by moving an even count to odd with a compare-and-swap (another writer
 * at it: the write is given up, as if evicted: that connection's next packet
 * is judged again), writes, and moves it on to even. A reader copies the slot
 * between two reads of the count and takes a change or an odd count as a
 * miss, which is judged by the policy again and never allows by itself. The
 * reads rely on loads not being reordered with loads (x86; another
 * architecture would need load-acquire); the writer's atomics order its
 * stores.
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

/* POLICY_CT_PAIR: the pair bucket's hash starts from the seed xor this, so
 * it is not the first step of the whole key's hash. */
#define POLICY_CT_PAIR 0x5bd1e9955bd1e995ULL

/* POLICY_CT_CANDIDATES: a connection's buckets (policy_ct_buckets_of). */
#define POLICY_CT_CANDIDATES 3

/* policy_ct_bucket_of is the bucket a 32-bit hash picks. */
static __always_inline __u32 policy_ct_bucket_of(__u32 hash)
{
	return ((__u64)hash * policy_ct_buckets) >> 32;
}

/* policy_ct_pair_bucket is the index of k's pair's bucket. */
static __always_inline __u32 policy_ct_pair_bucket(const struct policy_ct_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 p = policy_ct_seed ^ POLICY_CT_PAIR;

	p = (p ^ w[0]) * POLICY_CT_MUL;
	p = (p ^ w[1]) * POLICY_CT_MUL;
	return policy_ct_bucket_of(p >> 32);
}

/* policy_ct_hash is the hash of k whose halves give its own two buckets. */
static __always_inline __u64 policy_ct_hash(const struct policy_ct_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = policy_ct_seed;

	h = (h ^ w[0]) * POLICY_CT_MUL;
	h = (h ^ w[1]) * POLICY_CT_MUL;
	h = (h ^ w[2]) * POLICY_CT_MUL;
	h = (h ^ w[3]) * POLICY_CT_MUL;
	return h;
}

/*
 * policy_ct_buckets_of sets the indexes of k's three buckets: i[0] its
 * pair's (of the two addresses alone), i[1] and i[2] its own two (of the
 * whole key). A connection lives in its pair's bucket when that had room as
 * it was written, else in one of its own two (policy_ct_put). A pair with
 * few connections at a time (most: a client and a server) keeps them in one
 * bucket, which stays in the cache while the pair talks, instead of a random
 * one of the 5.8 MB table per connection (a cache miss per write and lookup:
 * docs/bench/2026-12-05/policy-profile); a pair with more overflows into two
 * random choices, so a bucket overflows only when both are full, as if there
 * were no pair bucket. Indexes may repeat: policy_ct_candidate says which to
 * read.
 */
static __always_inline void policy_ct_buckets_of(const struct policy_ct_key *k, __u32 *i)
{
	__u64 h = policy_ct_hash(k);

	i[0] = policy_ct_pair_bucket(k);
	i[1] = policy_ct_bucket_of(h);
	i[2] = policy_ct_bucket_of(h >> 32);
}

/* policy_ct_candidate says whether bucket i[c] is one to read: not one of
 * the buckets before it again. */
static __always_inline int policy_ct_candidate(const __u32 *i, int c)
{
	return c == 0 || (i[c] != i[0] && (c == 1 || i[c] != i[1]));
}

/* policy_ct_evicts says whether policy_ct_put may push a connection out of
 * bucket i[c] for k: one of k's own two; its pair's bucket only gives room. */
static __always_inline int policy_ct_evicts(const __u32 *i, int c)
{
	return c > 0 || i[0] == i[1] || i[0] == i[2];
}

/* policy_ct_key_is says whether slot key a is k (word by word: k is on the stack). */
static __always_inline int policy_ct_key_is(const struct policy_ct_key *a,
					    const struct policy_ct_key *k)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)k;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/* POLICY_CT_ELSEWHERE: policy_ct_find_in found no slot of k in its bucket. */
#define POLICY_CT_ELSEWHERE (-2)

/*
 * policy_ct_find_in is policy_ct_find_at in bucket *i (the lookup's key):
 * k's slot, -1 (a writer was at it), or POLICY_CT_ELSEWHERE.
 */
static __always_inline int policy_ct_find_in(const struct policy_ct_key *k,
					     struct policy_ct_entry *out, const __u32 *i)
{
	struct policy_ct_bucket *b = bpf_map_lookup_elem(&myelin_policy_ct, i);

	if (!b)
		return -1;
	for (__u32 w = 0; w < POLICY_CT_WAYS; w++) {
		struct policy_ct_slot *s = &b->way[w];
		__u32 seq = policy_ct_read32(&s->seq);

		asm volatile("" ::: "memory"); /* the key read after the count */
		if (!policy_ct_key_is(&s->key, k))
			continue;
		/* In use and seen (enum policy_ct_ref), in place like the close
		 * state: written once per bucket eviction or GC round, atomically,
		 * so the agent's bits of ref stay as the agent left them. */
		if ((s->ref & (POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN)) !=
		    (POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN))
			__sync_fetch_and_or(&s->ref, POLICY_CT_REF_IN_USE | POLICY_CT_REF_SEEN);
		if (out) {
			*out = s->entry;
			asm volatile("" ::: "memory"); /* the copy before the second read */
			if ((seq & 1) || policy_ct_read32(&s->seq) != seq)
				return -1;
		}
		return *i * POLICY_CT_WAYS + w;
	}
	return POLICY_CT_ELSEWHERE;
}

/*
 * policy_ct_find_at looks connection k up: the index of its slot (bucket *
 * POLICY_CT_WAYS + way), with a whole copy of its entry in *out (out NULL:
 * the slot only, for the in-place writes), or -1 (not tracked, or a writer
 * was at its slot): the first copy in the order of its buckets
 * (policy_ct_buckets_of; a copy behind it is an older connection of the same
 * tuple: policy_ct_put; a bucket that is also an earlier one is read again
 * on a miss, which is rare: no compare on the way of a hit). A slot found is
 * marked in use (policy_ct_put). Three straight reads, not a loop over
 * the buckets' indexes, so its frame holds a lookup key alone: a call
 * chain through it is at the stack's limit (policy_icmp_related). A global
 * function: the verifier checks it once, not at every call with every
 * caller's state.
 */
__noinline int policy_ct_find_at(const struct policy_ct_key *k, struct policy_ct_entry *out)
{
	__u32 i;
	__u64 h;
	int at;

	if (!k)
		return -1;
	/* Both hashes now: the key's words are not kept for later (on the stack). */
	h = policy_ct_hash(k);
	asm volatile("" : "+r"(h));
	i = policy_ct_pair_bucket(k);
	at = policy_ct_find_in(k, out, &i);
	if (at == POLICY_CT_ELSEWHERE) {
		i = policy_ct_bucket_of(h);
		at = policy_ct_find_in(k, out, &i);
	}
	if (at == POLICY_CT_ELSEWHERE) {
		i = policy_ct_bucket_of(h >> 32);
		at = policy_ct_find_in(k, out, &i);
	}
	return at < 0 ? -1 : at;
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

#endif /* MYELIN_LIB_POLICY_CT_TABLE_H */
