/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The table of NetworkPolicy's tracked connections (maps.h myelin_policy_ct;
 * what an entry means is lib/policy_ct.h): buckets of slots each written
 * under its sequence count; their layout, hashes and lookups here, their
 * writes in lib/policy_ct_write.h. The agent walks the same table
 * (internal/datapath/policyct_table.go).
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

#endif /* MYELIN_LIB_POLICY_CT_TABLE_H */
