/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The NAT table myelin_snat: lookups, state refresh and the creation of a
 * flow's two entries with the choice of its NAT port. Packet rewrites are in
 * masq.h; idle entries are removed by the agent (Datapath.GCNAT).
 */
#ifndef MYELIN_LIB_NAT_H
#define MYELIN_LIB_NAT_H

#include <linux/bpf.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "clock.h"
#include "config.h"
#include "l4.h"
#include "budget.h"
#include "maps.h"
#include "reasons.h"

#define NAT_PORT_TRIES 32 /* bounded: a crowded destination fails fast with DROP_NAT_NO_PORT */
#define NAT_REFRESH_NS 1000000000ULL /* last_seen is rewritten at most once a second */

/*
 * nat_key_of is the packet's own tuple as a NAT key in direction dir: the
 * forward key of a flow it starts, or the reverse key of a reply.
 */
static __always_inline void nat_key_of(struct nat_key *k, const struct ipv4_info *info,
				       const struct l4_info *l4, __u8 dir)
{
	k->saddr = info->saddr;
	k->daddr = info->daddr;
	k->sport = l4->sport;
	k->dport = l4->dport;
	k->proto = info->proto;
	k->dir = dir;
	k->pad = 0;
}

/* nat_lookup returns the entry of key, or NULL. */
static __always_inline struct nat_entry *nat_lookup(const struct nat_key *key)
{
	return bpf_map_lookup_elem(&myelin_snat, key);
}

/*
 * nat_touch records a packet of e's flow: last_seen (when a second old) and
 * the state flags. Plain stores: a concurrent packet on another CPU may win,
 * which loses at most a second of age or a flag the next packet sets again.
 */
static __always_inline void nat_touch(struct nat_entry *e, __u16 flags)
{
	__u64 now = clock_coarse_ns();

	if (now - e->last_seen > NAT_REFRESH_NS)
		e->last_seen = now;
	if ((e->flags & flags) != flags)
		e->flags |= flags;
}

/*
 * nat_port_nodeport_answered says whether a NodePort SNAT flow past its
 * handshake owns the reverse tuple rev (only UDP ones are in
 * myelin_nodeport_udp).
 */
static __always_inline int nat_port_nodeport_answered(const struct nat_key *rev)
{
	return bpf_map_lookup_elem(&myelin_nodeport_nat, rev) ||
	       (rev->proto == IPPROTO_UDP && bpf_map_lookup_elem(&myelin_nodeport_udp, rev));
}

/* nat_port_nodeport says whether a NodePort SNAT flow owns the reverse tuple rev. */
static __always_inline int nat_port_nodeport(const struct nat_key *rev)
{
	return bpf_map_lookup_elem(&myelin_nodeport_syn, rev) || nat_port_nodeport_answered(rev);
}

/* nat_port_at is the i-th NAT port from start, within nat_port_min..nat_port_max. */
static __always_inline __u16 nat_port_at(__u32 start, __u32 i)
{
	__u32 range = (__u32)nat_port_max - nat_port_min + 1;

	return nat_port_min + (start + i) % range;
}

/*
 * nat_claim makes the reverse entry rev, with its dport set to port, point
 * at orig. Returns 0 when it is ours (created now, or left behind by an
 * earlier entry of the same flow), 1 when another flow owns the port, or a
 * negative error (the map is full).
 */
static __always_inline int nat_claim(struct nat_key *rev, const struct nat_entry *orig, __be16 port)
{
	const struct nat_entry *e;
	long rc;

	rev->dport = port;
	rc = bpf_map_update_elem(&myelin_snat, rev, orig, BPF_NOEXIST);
	if (rc == 0) {
		/* Claimed, then checked: NodePort SNAT claims its ports the same way
		 * (np_claim), so of two flows racing for one tuple at least one sees
		 * the other and moves on. */
		if (lb_enabled && nat_port_nodeport(rev)) {
			bpf_map_delete_elem(&myelin_snat, rev);
			return 1;
		}
		return 0;
	}
	if (rc != -EEXIST)
		return -1;
	e = nat_lookup(rev);
	if (e && e->addr == orig->addr && e->port == orig->port)
		return 0;
	return 1;
}

/*
 * nat_pick_port claims a NAT port for the flow of rev: up to NAT_PORT_TRIES
 * ports of nat_port_min..nat_port_max in a row from a random start, never
 * the flow's original port as such: the range is disjoint from the node's
 * ephemeral ports, so no node socket can hold the tuple. Returns 0 with
 * rev->dport set, or a DROP_* reason.
 */
static __always_inline int nat_pick_port(struct nat_key *rev, const struct nat_entry *orig)
{
	__u32 start = bpf_get_prandom_u32();
	int rc = 1;

	for (__u32 i = 0; i < NAT_PORT_TRIES; i++) {
		rc = nat_claim(rev, orig, bpf_htons(nat_port_at(start, i)));
		if (rc <= 0)
			break;
	}
	if (rc < 0)
		return DROP_NAT_FULL;
	if (rc > 0)
		return DROP_NAT_NO_PORT;
	return 0;
}

/* nat_over_budget says whether pod addr may not open another masqueraded flow:
 * the list is looked up only while it holds a pod (myelin_budgets). */
static __always_inline int nat_over_budget(__u32 addr)
{
	return nat_budget && budget_any_over(BUDGET_NAT) &&
	       bpf_map_lookup_elem(&myelin_snat_over, &addr);
}

/*
 * nat_create creates both entries of the new flow fwd (its original tuple)
 * translated to source nat_addr, and returns 0 with the NAT port in *port,
 * or a DROP_* reason (DROP_NAT_BUDGET, creating nothing, for a pod over its
 * budget). The reverse entry is claimed first, so the port is
 * taken atomically (BPF_NOEXIST); a forward insert that fails undoes it. Two
 * CPUs creating the same flow at once both succeed: the later forward entry
 * wins and the other reverse entry ages out.
 */
static __always_inline int nat_create(const struct nat_key *fwd, __be32 nat_addr, __u16 flags,
				      __be16 *port)
{
	__u64 now = clock_coarse_ns();
	struct nat_key rev = {
		.saddr = fwd->daddr,
		.daddr = nat_addr,
		.sport = fwd->dport,
		.proto = fwd->proto,
		.dir = NAT_DIR_INGRESS,
	};
	struct nat_entry orig = {
		.last_seen = now,
		.addr = fwd->saddr,
		.port = fwd->sport,
		.flags = flags,
	};
	struct nat_entry xlat = {.last_seen = now, .addr = nat_addr, .flags = flags};
	int reason;

	if (nat_over_budget(fwd->saddr))
		return DROP_NAT_BUDGET;
	reason = nat_pick_port(&rev, &orig);
	if (reason)
		return reason;
	xlat.port = rev.dport;
	if (bpf_map_update_elem(&myelin_snat, fwd, &xlat, BPF_ANY) < 0) {
		bpf_map_delete_elem(&myelin_snat, &rev);
		return DROP_NAT_FULL;
	}
	*port = xlat.port;
	return 0;
}

#endif /* MYELIN_LIB_NAT_H */
