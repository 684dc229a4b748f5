/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy (docs/policy.md). Egress is checked where a pod's packet
 * leaves it (myelin_from_pod, after the Service stage), ingress where a
 * packet enters a pod (endpoint_deliver for what BPF delivers, myelin_to_pod
 * for what the stack delivers), in both host routing modes.
 *
 * A pod without a myelin_policy_eps entry is not isolated: one hash lookup.
 * An isolated pod's established connections cost one myelin_policy_ct
 * lookup. A new connection in an isolated direction looks the peer's
 * identity up in myelin_ipcache (a miss is world), then its allowed ports in
 * myelin_policy (the identity's entry, then the any-peer entry 0); allowed,
 * both directions of the tuple are tracked, so its replies pass. A TCP
 * SYN without ACK opens a connection: it never takes the tracked path and is
 * judged by the policy again (and tracked again if allowed), so a tightened
 * policy or a reused peer address never inherits an old entry; the agent
 * deletes the entries of changed endpoints and removed peers for the other
 * protocols. Traffic the host itself sends from this node's own address
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

#define POLICY_IDENTITY_WORLD 2 /* an address myelin_ipcache does not cover */

/* policy_tuple is a packet's tuple as policy sees it (network order). */
struct policy_tuple {
	__u32 saddr;
	__u32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 syn;	/* a TCP SYN without ACK: a new connection, never tracked-path */
	__u8 from_host; /* sent by this host's stack: node_ip is exempt (kubelet probes) */
};

/* policy_ep_lookup returns the isolation state of local pod addr, or NULL (not isolated). */
static __always_inline const struct policy_ep *policy_ep_lookup(__u32 addr)
{
	const struct policy_ep *pe = bpf_map_lookup_elem(&myelin_policy_eps, &addr);

	if (pe && !(pe->flags & (POLICY_F_INGRESS | POLICY_F_EGRESS)))
		return NULL;
	return pe;
}

/*
 * policy_ports reads the ports of TCP, UDP and SCTP (the first four bytes of
 * each header); other protocols and later fragments have 0 ports.
 */
static __always_inline void policy_ports(struct __sk_buff *skb, const struct ipv4_info *info,
					 __be16 *sport, __be16 *dport)
{
	__be16 p[2] = {};

	if (info->l4_off && (info->proto == IPPROTO_TCP || info->proto == IPPROTO_UDP ||
			     info->proto == IPPROTO_SCTP))
		bpf_skb_load_bytes(skb, info->l4_off, p, sizeof(p));
	*sport = p[0];
	*dport = p[1];
}

/* policy_tcp_syn says whether the packet is a TCP SYN without ACK (opens a connection). */
static __always_inline __u8 policy_tcp_syn(struct __sk_buff *skb, const struct ipv4_info *info)
{
	__u8 flags = 0;

	if (!info->l4_off || info->proto != IPPROTO_TCP ||
	    bpf_skb_load_bytes(skb, info->l4_off + TCP_FLAGS_OFF, &flags, sizeof(flags)) < 0)
		return 0;
	return (flags & (TCP_FLAGS_SYN | TCP_FLAGS_ACK)) == TCP_FLAGS_SYN;
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

/* policy_ct_key_of fills the tracking key of tuple t in direction dir, reversed if rev. */
static __always_inline void policy_ct_key_of(struct policy_ct_key *k, const struct policy_tuple *t,
					     __u8 dir, int rev)
{
	k->saddr = rev ? t->daddr : t->saddr;
	k->daddr = rev ? t->saddr : t->daddr;
	k->sport = rev ? t->dport : t->sport;
	k->dport = rev ? t->sport : t->dport;
	k->proto = t->proto;
	k->dir = dir;
	k->pad = 0;
}

/*
 * policy_enforce checks tuple t at local pod's check of direction dir
 * (pe: its isolation state). It returns 0 to go on, or the drop reason.
 */
static __always_inline int policy_enforce(const struct policy_ep *pe, const struct policy_tuple *t,
					  __u32 local, __u8 dir)
{
	struct policy_ct_entry ce = {};
	struct policy_ct_key k = {};
	__u8 on, incomplete;
	__u32 peer;

	policy_ct_key_of(&k, t, dir, 0);
	if (!t->syn && bpf_map_lookup_elem(&myelin_policy_ct, &k))
		return 0;
	on = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS : POLICY_F_EGRESS;
	incomplete = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS_INCOMPLETE
					       : POLICY_F_EGRESS_INCOMPLETE;
	peer = dir == POLICY_DIR_INGRESS ? t->saddr : t->daddr;
	if ((pe->flags & on) && !(dir == POLICY_DIR_INGRESS && t->from_host && peer == node_ip) &&
	    !policy_allows(local, peer, t, dir))
		return (pe->flags & incomplete) ? DROP_POLICY_MAP_FULL : DROP_POLICY_DENIED;
	/* Allowed (or this direction is open): track it, and its replies. */
	ce.created = bpf_ktime_get_ns();
	bpf_map_update_elem(&myelin_policy_ct, &k, &ce, BPF_ANY);
	policy_ct_key_of(&k, t, dir == POLICY_DIR_INGRESS ? POLICY_DIR_EGRESS : POLICY_DIR_INGRESS,
			 1);
	bpf_map_update_elem(&myelin_policy_ct, &k, &ce, BPF_ANY);
	return 0;
}

/*
 * policy_ingress is the ingress check of the packet info describes, entering
 * the local pod info->daddr: 0 to go on, or the drop reason. from_host says
 * the host's own stack sent it (only then is node_ip exempt).
 */
static __always_inline int policy_ingress(struct __sk_buff *skb, const struct ipv4_info *info,
					  __u8 from_host)
{
	const struct policy_ep *pe = policy_ep_lookup(info->daddr);
	struct policy_tuple t = {.saddr = info->saddr, .daddr = info->daddr, .proto = info->proto};

	if (!pe)
		return 0;
	t.from_host = from_host;
	t.syn = policy_tcp_syn(skb, info);
	policy_ports(skb, info, &t.sport, &t.dport);
	return policy_enforce(pe, &t, info->daddr, POLICY_DIR_INGRESS);
}

/*
 * policy_egress_begin notes what the egress check needs from a pod's packet
 * before the Service stage may translate it: the pod's isolation state, its
 * own address and source port. It returns NULL when the pod is not isolated.
 */
static __always_inline const struct policy_ep *
policy_egress_begin(struct __sk_buff *skb, const struct ipv4_info *info, struct policy_tuple *t)
{
	const struct policy_ep *pe = policy_ep_lookup(info->saddr);
	__be16 dport;

	if (!pe)
		return NULL;
	t->saddr = info->saddr;
	policy_ports(skb, info, &t->sport, &dport);
	return pe;
}

/*
 * policy_egress is the egress check after the Service stage: the pod's own
 * source (noted by policy_egress_begin) towards the translated destination
 * (a Service's backend). 0 to go on, or the drop reason.
 */
static __always_inline int policy_egress(struct __sk_buff *skb, const struct ipv4_info *info,
					 const struct policy_ep *pe, struct policy_tuple *t)
{
	__be16 sport;

	t->daddr = info->daddr;
	t->proto = info->proto;
	policy_ports(skb, info, &sport, &t->dport);
	t->syn = policy_tcp_syn(skb, info);
	return policy_enforce(pe, t, t->saddr, POLICY_DIR_EGRESS);
}

#endif /* MYELIN_LIB_POLICY_H */
