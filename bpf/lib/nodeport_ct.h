/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NodePort flows to a local backend (a pod of this node, or the node itself
 * for a hostNetwork backend) keep Service conntrack entries as pods' flows
 * do (ct.h), in two tables. Anyone who reaches a NodePort opens such a flow
 * from any source, so a new flow goes into the LRU myelin_lb_ct_nodeport_syn,
 * awaiting its backend's answer (CT_F_AWAITING_REPLY). The client's ACK of
 * the backend's SYN-ACK, which a forged source never sees, moves both
 * entries to the hash myelin_lb_ct_nodeport (np_ct_client_ack), which the
 * agent's GC collects and a flood from forged sources never reaches. A UDP
 * flow shows no such proof (a forged source's datagram gets replies too)
 * and stays in the LRU. Lookups follow the protocol: TCP the hash, then the
 * LRU; UDP the LRU only.
 */
#ifndef MYELIN_LIB_NODEPORT_CT_H
#define MYELIN_LIB_NODEPORT_CT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "ct.h"
#include "lb.h"
#include "lb_flow.h"
#include "maps.h"

/*
 * np_ct_find returns the forward entry of the NodePort flow fwd, or NULL,
 * with *promoted set when it is in myelin_lb_ct_nodeport.
 */
static __always_inline struct ct_entry *np_ct_find(const struct ct_key *fwd, int *promoted)
{
	struct ct_entry *e;

	*promoted = 0;
	if (fwd->proto == IPPROTO_TCP) {
		e = ct_lookup(&myelin_lb_ct_nodeport, fwd);
		if (e) {
			*promoted = 1;
			return e;
		}
	}
	return ct_lookup(&myelin_lb_ct_nodeport_syn, fwd);
}

/*
 * np_ct_forget deletes the flow fwd -> fv from myelin_lb_ct_nodeport: its
 * tuple now goes to a backend on another node (the NodePort SNAT tables,
 * looked up first), so its local entries would only hold room.
 */
static __always_inline void np_ct_forget(const struct ct_key *fwd, const struct ct_entry *fv)
{
	struct ct_key rev = {};
	struct ct_entry rv = {};

	ct_reverse_of(fwd, fv, &rev, &rv);
	bpf_map_delete_elem(&myelin_lb_ct_nodeport, fwd);
	bpf_map_delete_elem(&myelin_lb_ct_nodeport, &rev);
}

/*
 * np_ct_synack records in the reverse entry e of a TCP flow awaiting its
 * backend the number the client's ACK of the backend's SYN-ACK carries: its
 * sequence number + 1, in backend_id (unused in reverse entries; 0 when the
 * sum is 0: that flow is never promoted). Called for SYN-ACKs on the
 * backend's own path only (from_backend: its veth, the node's stack).
 */
static __always_inline void np_ct_synack(struct __sk_buff *skb, const struct ipv4_info *info,
					 struct ct_entry *e)
{
	struct l4_head h = {};

	if (!(e->flags & CT_F_AWAITING_REPLY) ||
	    l4_load_head(skb, info, &h, offsetof(struct l4_head, ack)) < 0)
		return;
	e->backend_id = bpf_ntohl(h.seq) + 1; /* a reverse entry's SYN-ACK number */
}

/*
 * np_ct_reply_xlate is ct_reply_xlate for the NodePort flows to local
 * backends; a SYN-ACK from the backend of a flow awaiting it is recorded
 * (np_ct_synack). TCP replies of promoted flows cost one lookup, as
 * before; UDP replies one in the LRU.
 */
static __always_inline int np_ct_reply_xlate(struct __sk_buff *skb, struct ipv4_info *info,
					     struct l4_info *l4, __u16 *flags, int from_backend)
{
	struct ct_key key;
	struct ct_entry *e;

	ct_key_of(&key, info, l4, CT_DIR_REVERSE);
	if (info->proto == IPPROTO_TCP) {
		e = ct_lookup(&myelin_lb_ct_nodeport, &key);
		if (e)
			return ct_reply_apply(e, skb, info, l4, flags, from_backend);
	}
	e = ct_lookup(&myelin_lb_ct_nodeport_syn, &key);
	if (!e)
		return 0;
	if (from_backend && l4->tcp_syn && !l4->tcp_opening)
		np_ct_synack(skb, info, e);
	return ct_reply_apply(e, skb, info, l4, flags, from_backend);
}

/*
 * np_ct_promote moves the flow fwd -> fv, whose reverse entry is rev -> rv
 * (copies on the stack: an LRU element may be reused under a pointer), from
 * the LRU to myelin_lb_ct_nodeport. The flow still awaits its backend's
 * answer there (CT_F_AWAITING_REPLY, for the GC's timeout): a client that
 * completes handshakes and sends nothing holds its entries 60 s, not 6 h.
 * Reverse entry first, so a reply always finds one of the two; with the hash
 * full the flow stays in the LRU, where it works as before.
 */
static __always_inline void np_ct_promote(const struct ct_key *fwd, const struct ct_entry *fv,
					  const struct ct_key *rev, const struct ct_entry *rv)
{
	if (bpf_map_update_elem(&myelin_lb_ct_nodeport, rev, rv, BPF_ANY) < 0)
		return;
	if (bpf_map_update_elem(&myelin_lb_ct_nodeport, fwd, fv, BPF_ANY) < 0) {
		bpf_map_delete_elem(&myelin_lb_ct_nodeport, rev);
		return;
	}
	bpf_map_delete_elem(&myelin_lb_ct_nodeport_syn, fwd);
	bpf_map_delete_elem(&myelin_lb_ct_nodeport_syn, rev);
}

/*
 * np_ct_client_ack promotes the TCP flow fwd -> fv, kept in the LRU, when
 * the client's segment (no SYN) acknowledges exactly the backend's SYN-ACK
 * its reverse entry recorded: the client saw it, so the source is its own.
 * A blind client (a forged source) never sees the SYN-ACK and guesses one
 * number in 2^32; the backend's other answers (a challenge ACK, an ACK of a
 * lower second SYN, a RST) record nothing. One lookup, for client segments
 * of flows in the LRU only; the entries are checked as copied.
 */
static __always_inline void np_ct_client_ack(struct __sk_buff *skb, const struct ipv4_info *info,
					     const struct ct_key *fwd, const struct ct_entry *fv)
{
	struct ct_entry f = *fv, r, want = {};
	struct ct_key rev = {};
	struct l4_head h = {};
	const struct ct_entry *rv;

	ct_reverse_of(fwd, &f, &rev, &want);
	rv = ct_lookup(&myelin_lb_ct_nodeport_syn, &rev);
	if (!rv)
		return;
	r = *rv;
	if (!(r.flags & CT_F_AWAITING_REPLY) || !r.backend_id ||
	    r.client_addr != want.client_addr || r.front_addr != want.front_addr ||
	    r.front_port != want.front_port)
		return;
	if (l4_load_head(skb, info, &h, L4_TCP_HEAD_LOAD) < 0 || !(h.flags & TCP_FLAGS_ACK) ||
	    bpf_ntohl(h.ack) != r.backend_id)
		return;
	np_ct_promote(fwd, &f, &rev, &r);
}

/*
 * np_ct_commit records a packet of the NodePort flow fwd to the local
 * backend f (nodeport_ct.h): a kept flow is touched in its table, and a TCP
 * flow in the LRU moves to the hash when the client's segment acknowledges
 * the backend's SYN-ACK. A new flow (a TCP flow's first SYN number kept,
 * ct_syn_next) goes into the LRU to await its backend, unless its tuple
 * has entries in the hash (old: a client that proved the tuple its own
 * opens again, after a FIN or RST, or its backend left): then it takes
 * their place there, no more room than they held, so a forged RST and SYN
 * can't move a client's tuple back to the LRU. Returns 0 or
 * DROP_SVC_CT_FULL.
 */
static __always_inline int np_ct_commit(struct __sk_buff *skb, const struct ipv4_info *info,
					const struct l4_info *l4, const struct lb_svc *svc,
					const struct ct_key *fwd, const struct lb_flow *f,
					const struct ct_entry *old)
{
	struct ct_key rev = {};
	struct ct_entry rv = {};
	__u32 syn_next;

	if (f->ct && old)
		return lb_flow_commit(&myelin_lb_ct_nodeport, fwd, f, svc, l4, CT_F_NODEPORT, 0);
	if (f->ct) {
		lb_flow_commit(&myelin_lb_ct_nodeport_syn, fwd, f, svc, l4, CT_F_NODEPORT, 0);
		if (info->proto == IPPROTO_TCP && !l4->tcp_syn)
			np_ct_client_ack(skb, info, fwd, f->ct);
		return 0;
	}
	syn_next = ct_syn_next(skb, info);
	if (old) {
		/* Written over in place (ct_create keeps a first SYN's number that
		 * way); only a reverse entry of another backend goes first. */
		ct_reverse_of(fwd, old, &rev, &rv);
		if (old->be_addr != f->be.addr || old->be_port != f->be.port)
			bpf_map_delete_elem(&myelin_lb_ct_nodeport, &rev);
		if (!lb_flow_commit(&myelin_lb_ct_nodeport, fwd, f, svc, l4, CT_F_NODEPORT,
				    syn_next))
			return 0;
		bpf_map_delete_elem(&myelin_lb_ct_nodeport, fwd);
		bpf_map_delete_elem(&myelin_lb_ct_nodeport, &rev);
	}
	return lb_flow_commit(&myelin_lb_ct_nodeport_syn, fwd, f, svc, l4, CT_F_NODEPORT, syn_next);
}

/*
 * np_ct_keep is the l4 lb_flow_backend judges a NodePort packet by:
 * a SYN on an established, not closing flow in myelin_lb_ct_nodeport whose
 * backend is still in the pool at its place is no new connection (its
 * client proved the tuple its own): it goes to the flow's backend, whose
 * challenge ACK answers it, as the kernel's own conntrack does. Only SYNs
 * pay the pool lookup.
 */
static __always_inline const struct l4_info *np_ct_keep(const struct l4_info *l4,
							const struct ct_entry *ct,
							const struct lb_svc *svc, int promoted,
							struct l4_info *kept)
{
	if (!promoted || !l4->tcp_opening ||
	    (ct->flags & (CT_F_ESTABLISHED | CT_F_CLOSING)) != CT_F_ESTABLISHED ||
	    ct->svc_id != svc->id ||
	    lb_index_lookup(svc, ct->index, LB_CLIENT_EXTERNAL) != ct->backend_id)
		return l4;
	*kept = *l4;
	kept->tcp_opening = 0;
	return kept;
}

#endif /* MYELIN_LIB_NODEPORT_CT_H */
