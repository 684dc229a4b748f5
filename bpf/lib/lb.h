/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service lookup and backend selection: ClientIP affinity first, then the
 * service's Maglev table (a hash of the flow's tuple picks the entry, so a
 * flow lands on the same backend on every node) or a random slot. The agent
 * writes the maps (internal/datapath, services.go); translation is in
 * service.h.
 */
#ifndef MYELIN_LIB_LB_H
#define MYELIN_LIB_LB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "config.h"
#include "maps.h"

#define NSEC_PER_SEC  1000000000ULL
#define JHASH_INITVAL 0xdeadbeef
#define LB_HASH_SEED  0x6d79656c /* fixed: every node hashes a flow alike */

/* lb_svc_lookup returns the service of frontend addr:port/proto (network order), or NULL. */
static __always_inline const struct lb_svc *lb_svc_lookup(__be32 addr, __be16 port, __u8 proto)
{
	struct lb_svc_key key = {.addr = addr, .port = port, .proto = proto};

	return bpf_map_lookup_elem(&myelin_lb_services, &key);
}

/*
 * lb_port_marked says whether port (network order) has its bit in bitmap, an
 * array of LB_PORT_WORDS words (myelin_lb_ports, myelin_lb_nodeports) whose
 * lookup the kernel inlines. A word that can't be read counts as set: a bit
 * only ever spares a lookup.
 */
static __always_inline int lb_port_marked(void *bitmap, __be16 port)
{
	__u32 key = (__u32)port / 32;
	const __u32 *word = bpf_map_lookup_elem(bitmap, &key);

	return !word || (*word >> ((__u32)port % 32)) & 1;
}

/* lb_backend_lookup returns backend id, or NULL when it was deleted. */
static __always_inline const struct lb_backend *lb_backend_lookup(__u32 id)
{
	return bpf_map_lookup_elem(&myelin_lb_backends, &id);
}

static __always_inline __u32 rol32(__u32 word, unsigned int shift)
{
	return (word << shift) | (word >> (32 - shift));
}

/* lb_jhash_3words is the kernel's jhash_3words (lookup3.c, Bob Jenkins). */
static __always_inline __u32 lb_jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval)
{
	initval += JHASH_INITVAL + (3 << 2);
	a += initval;
	b += initval;
	c += initval;
	c ^= b;
	c -= rol32(b, 14);
	a ^= c;
	a -= rol32(c, 11);
	b ^= a;
	b -= rol32(a, 25);
	c ^= b;
	c -= rol32(b, 16);
	a ^= c;
	a -= rol32(c, 4);
	b ^= a;
	b -= rol32(a, 14);
	c ^= b;
	c -= rol32(b, 24);
	return c;
}

/* lb_hash hashes a flow's 5-tuple (the forward conntrack key) for Maglev. */
static __always_inline __u32 lb_hash(const struct ct_key *t)
{
	return lb_jhash_3words(t->saddr, t->daddr ^ t->proto, ((__u32)t->sport << 16) | t->dport,
			       LB_HASH_SEED);
}

/* lb_maglev_lookup returns entry idx of service svc_id's Maglev table, 0 if none. */
static __always_inline __u32 lb_maglev_lookup(__u32 svc_id, __u32 idx)
{
	void *table = bpf_map_lookup_elem(&myelin_lb_maglev, &svc_id);
	__u32 *id;

	if (!table)
		return 0;
	/* An index beyond a table of another size returns NULL, not garbage. */
	id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

/*
 * lb_client is who opens a flow to a service: the node's own pods and
 * processes, or a client outside the node (NodePort traffic arriving on the
 * uplink). They choose from the same pool but with LB_SVC_F_EXT_LOCAL
 * (externalTrafficPolicy: Local): then outside clients choose among the
 * node's own backends only (the first local_count slots), by the Maglev
 * table when there is one, and the node's clients among all slots at random
 * (kube-proxy "short-circuits" local traffic so too).
 */
enum lb_client {
	LB_CLIENT_NODE,
	LB_CLIENT_EXTERNAL,
};

/* lb_pool_size is how many slots of svc client chooses from. */
static __always_inline __u32 lb_pool_size(const struct lb_svc *svc, enum lb_client client)
{
	if (client == LB_CLIENT_EXTERNAL && (svc->flags & LB_SVC_F_EXT_LOCAL))
		return svc->local_count;
	return svc->count;
}

/* lb_slot_lookup returns the backend id in slot of client's pool of svc, 0 if none. */
static __always_inline __u32 lb_slot_lookup(const struct lb_svc *svc, __u32 slot,
					    enum lb_client client)
{
	struct lb_slot_key key = {.svc_id = svc->id, .slot = slot};
	__u32 *id;

	if (slot >= lb_pool_size(svc, client))
		return 0;
	id = bpf_map_lookup_elem(&myelin_lb_slots, &key);
	return id ? *id : 0;
}

/* lb_uses_maglev says whether client selects by svc's Maglev table. */
static __always_inline int lb_uses_maglev(const struct lb_svc *svc, enum lb_client client)
{
	if (!maglev_table_size || !(svc->flags & LB_SVC_F_MAGLEV))
		return 0;
	return client == LB_CLIENT_EXTERNAL || !(svc->flags & LB_SVC_F_EXT_LOCAL);
}

/* lb_index_lookup returns the backend at index of client's selection pool of svc. */
static __always_inline __u32 lb_index_lookup(const struct lb_svc *svc, __u32 index,
					     enum lb_client client)
{
	if (lb_uses_maglev(svc, client))
		return lb_maglev_lookup(svc->id, index);
	return lb_slot_lookup(svc, index, client);
}

/*
 * lb_pick chooses a backend for the new flow t of client: the Maglev table
 * entry of its hash, else (no table, or an empty entry) a random slot of
 * its pool, which is not empty. Returns the backend id (0: none) and where
 * it was found in *index.
 */
static __always_inline __u32 lb_pick(const struct lb_svc *svc, const struct ct_key *t, __u32 *index,
				     enum lb_client client)
{
	__u32 id;

	if (lb_uses_maglev(svc, client)) {
		*index = lb_hash(t) % maglev_table_size;
		id = lb_maglev_lookup(svc->id, *index);
		if (id)
			return id;
	}
	*index = bpf_get_prandom_u32() % lb_pool_size(svc, client);
	return lb_slot_lookup(svc, *index, client);
}

/*
 * lb_affinity_get returns the backend client sticks to, 0 if none: the
 * entry must be younger than the service's timeout and its backend still at
 * its place in the selection pool (returned in *index), i.e. still ready.
 * A hit counts as the client's latest new connection.
 */
static __always_inline __u32 lb_affinity_get(const struct lb_svc *svc, __be32 client, __u32 *index,
					     enum lb_client kind)
{
	struct lb_affinity_key key = {.svc_id = svc->id, .client = client};
	struct lb_affinity *a = bpf_map_lookup_elem(&myelin_lb_affinity, &key);
	__u64 now = clock_coarse_ns();

	if (!a || clock_age_ns(now, a->last_used) > (__u64)svc->affinity_timeout * NSEC_PER_SEC)
		return 0;
	if (lb_index_lookup(svc, a->index, kind) != a->backend_id)
		return 0;
	*index = a->index;
	/* A plain store: racing CPUs write about the same time. */
	a->last_used = now;
	return a->backend_id;
}

/* lb_affinity_put makes client stick to backend id, found at index. */
static __always_inline void lb_affinity_put(const struct lb_svc *svc, __be32 client, __u32 id,
					    __u32 index)
{
	struct lb_affinity_key key = {.svc_id = svc->id, .client = client};
	struct lb_affinity a = {.last_used = clock_coarse_ns(), .backend_id = id, .index = index};

	/* LRU: a failed insert only loses the stickiness of this client. */
	bpf_map_update_elem(&myelin_lb_affinity, &key, &a, BPF_ANY);
}

/*
 * lb_select chooses the backend of a new flow t of client to svc: the
 * client's affinity when the service has one, else lb_pick. Returns 0 when
 * the client's pool has no ready backend, else the backend id with where it
 * was found in the pool in *index.
 */
static __always_inline __u32 lb_select(const struct lb_svc *svc, const struct ct_key *t,
				       __u32 *index, enum lb_client client)
{
	int affinity = svc->flags & LB_SVC_F_AFFINITY;
	__u32 id;

	if (!lb_pool_size(svc, client))
		return 0;
	if (affinity) {
		id = lb_affinity_get(svc, t->saddr, index, client);
		if (id)
			return id;
	}
	id = lb_pick(svc, t, index, client);
	if (id && affinity)
		lb_affinity_put(svc, t->saddr, id, *index);
	return id;
}

#endif /* MYELIN_LIB_LB_H */
