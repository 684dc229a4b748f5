/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NetworkPolicy (docs/policy.md). Egress is checked where a pod's packet
 * leaves it (myelin_from_pod, after the Service stage; whether an ICMP error
 * is about a tracked connection, before it), ingress where a
 * packet enters a pod (endpoint_deliver for what BPF delivers, myelin_to_pod
 * for what the stack delivers), in both host routing modes.
 *
 * A pod's isolation flags come with its myelin_endpoints entry, which the
 * programs look up anyway (myelin_policy_eps answers when there is none): a
 * pod that is not isolated costs a test of those flags. An isolated pod's
 * established connections cost one myelin_policy_ct lookup per check (one
 * entry per connection, shared by both its directions and by both ends when
 * they are pods of this node). A new connection in an isolated direction
 * looks the peer's identity up in myelin_ipcache (a miss is world), then its
 * allowed ports in myelin_policy (the identity's entry, then the any-peer
 * entry 0); allowed, the end's bit is set in the connection's entry, so its
 * replies pass. A TCP SYN without ACK opens a connection: it never takes the
 * tracked path and is judged by the policy again (and tracked again if
 * allowed), so a tightened policy or a reused peer address never inherits an
 * old entry. For established connections of every protocol the agent forgets,
 * after a policy change, the ends of changed endpoints (and of peers in a
 * changed prefix) that the new state no longer allows in the direction their
 * check accepted them (enum policy_ct_ends, IN/OUT), and those of peers whose
 * address changed (datapath.PurgePolicyCT). A TCP connection's entry is
 * deleted once both ends' FINs are acknowledged (policy_ct_close), so closed
 * connections give their entries back instead of making every new connection
 * push one out of a full table; the agent deletes those of other protocols
 * once idle, and TCP connections that an RST ended (lib/policy_ct.h).
 * A later IP fragment carries no ports: one not of TCP passes a check that
 * passed its datagram's first fragment (policy_frag_passed: one myelin_frags
 * lookup per later fragment, one write per first fragment at each check of an
 * isolated pod), else it is judged as a packet without ports (only an
 * all-ports rule allows it).
 * An ICMP error (destination unreachable, time exceeded) about a TCP or UDP
 * connection tracked for the pod passes as the connection's replies do
 * (policy_icmp_related: path MTU discovery, port unreachable); other ICMP is
 * judged by the rules for ICMP.
 * Traffic the host itself sends from one of this node's own addresses
 * (kubelet probes: myelin_to_pod with ingress_ifindex 0; node_ip, or an
 * address in myelin_host_addrs, looked up only for such a new connection)
 * is allowed in; the node IP on a packet from the uplink or the overlay is
 * never exempt (those programs drop it as spoofed before it reaches a pod),
 * nor is any host address on a packet the stack forwards.
 */
#ifndef MYELIN_LIB_POLICY_H
#define MYELIN_LIB_POLICY_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "frag.h"
#include "icmp.h"
#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "policy_ct.h"
#include "policy_l4.h"

#define POLICY_IDENTITY_WORLD 2	  /* an address myelin_ipcache does not cover */
#define POLICY_ICMP_ERROR_MAX 576 /* bytes of IPv4 an ICMP error may take (RFC 1812) */

/* policy_ct_seen is what a check found in the connection's tracked entry. */
struct policy_ct_seen {
	__u32 ends;   /* the noted ends (enum policy_ct_ends) */
	__u32 fresh;  /* a SYN: the end bit it started the entry afresh with, else 0 */
	__u8 closing; /* the packet is part of the connection's close (FIN, or after one) */
	struct policy_ct_entry entry; /* the entry as read (valid when closing is set) */
};

/* policy_enforce's fresh_also for a SYN the stack delivers: its bit is added to the entry. */
#define POLICY_CT_MERGE 0xff
/* policy_enforce's fresh_also for a SYN whose receiver's check may write the entry
 * (policy_egress): nothing is written, seen->fresh says what is pending. */
#define POLICY_CT_DEFER 0xfe

/* policy_rx is what the egress check tells the ingress check of the same packet. */
enum policy_rx {
	POLICY_RX_TRACKED = 1, /* the receiver's end is tracked: pass, no lookup */
	POLICY_RX_CLOSING = 2, /* tracked, and the packet is part of the close: follow
				* it on info->policy_ct, no lookup */
	POLICY_RX_SELF = 3,    /* the sender's own packet back into it (hairpin): pass */
};

#define POLICY_F_ISOLATED (POLICY_F_INGRESS | POLICY_F_EGRESS)

/*
 * policy_ep_flags returns the isolation flags of local pod addr: from its
 * endpoint entry ep when the caller has it (the agent mirrors the flags
 * there, so the check costs no lookup), else from myelin_policy_eps.
 */
static __always_inline __u8 policy_ep_flags(const struct endpoint_info *ep, __u32 addr)
{
	const struct policy_ep *pe;

	if (ep)
		return ep->flags;
	pe = bpf_map_lookup_elem(&myelin_policy_eps, &addr);
	return pe ? pe->flags : 0;
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

/*
 * policy_frag_note records at a first fragment whether the check of stage
 * passed it (frag_mark); policy_frag_passed says whether a later fragment's
 * first passed it. from_host: the host's own stack sent the fragment (the
 * ingress check's from_host); the host's first fragment passes only the
 * host's later ones, as a host-exempt entry passes only the host's packets
 * (POLICY_CT_HOST_PEER): its address may be another machine's too. Not for
 * TCP: a later fragment could overlap the first's header (its flags) for a
 * receiver that accepts overlapping fragments, and TCP sets DF and sizes its
 * segments to the path, so its later fragments are judged without ports.
 * Whole datagrams: a test of info->frag each.
 */
static __always_inline void policy_frag_note(struct __sk_buff *skb, const struct ipv4_info *info,
					     __u8 stage, int pass, __u8 from_host)
{
	if (info->frag && info->proto != IPPROTO_TCP)
		frag_mark(skb, info, stage, pass, from_host);
}

static __always_inline int policy_frag_passed(struct __sk_buff *skb, const struct ipv4_info *info,
					      __u8 stage, __u8 from_host)
{
	return ipv4_later_frag(info) && info->proto != IPPROTO_TCP &&
	       frag_marked(skb, info, stage, from_host);
}

/*
 * policy_host_address says whether addr is one of the node's own addresses
 * the agent lists in myelin_host_addrs (a global address on lo, a second NIC:
 * the kernel picks the first address it finds as the source of the host's
 * connections to pods, which need not be node_ip). Not inlined: its lookup
 * key stays out of policy_enforce's frame, which every check inlines.
 */
static __noinline int policy_host_address(__u32 addr)
{
	return bpf_map_lookup_elem(&myelin_host_addrs, &addr) != NULL;
}

/*
 * policy_enforce checks tuple t at local pod's check of direction dir
 * (t->flags: its isolation state). It returns 0 to go on, or the drop
 * reason. *seen gets what the connection's entry said when it was tracked.
 * from_host: the host's own stack built the packet (myelin_to_pod with
 * ingress_ifindex 0): an ingress check lets it in from the node's addresses
 * (a parameter, not a field of t, so the callers that pass 0 lose the code).
 * The close of a tracked TCP connection is followed (policy_ct_close) at the
 * packet's last check on this node: ingress, or egress when the receiving
 * end is not a tracked pod of this node. fresh_also: for a SYN whose entry
 * starts afresh at this check, the other end's bit to keep (policy_ct_track);
 * POLICY_CT_MERGE: a SYN adds its bit to what the entry holds.
 */
static __always_inline int policy_enforce(const struct policy_tuple *t, __u32 local, __u8 dir,
					  __u8 from_host, __u32 fresh_also,
					  const struct policy_ct_entry *known,
					  struct policy_ct_seen *seen)
{
	const struct policy_ct_entry *v = NULL;
	struct policy_ct_entry cur = {};
	struct policy_ct_slot *at = NULL;
	struct policy_ct_key k = {};
	__u8 on, incomplete;
	__u32 peer, bit, opened, via;
	int fresh;

	bit = policy_ct_key_of(&k, t, dir);
	if (!t->syn) {
		if (known) {
			cur = *known;
			v = &cur;
		} else {
			at = policy_ct_find(&k, &cur);
			v = at ? &cur : NULL;
		}
		/* An entry the host's exemption made passes only what the host
		 * sends into the pod: its address may be another machine's too
		 * (an anycast VIP, an address moved since). */
		if (v && (cur.ends & bit) &&
		    !(dir == POLICY_DIR_INGRESS && (cur.ends & POLICY_CT_HOST_PEER) &&
		      !from_host)) {
			seen->ends = cur.ends;
			if (t->proto != IPPROTO_TCP) {
				policy_ct_refresh(at, cur.fin_lo);
				return 0;
			}
			if (!((t->tcp_flags & (POLICY_TCP_FIN | POLICY_TCP_RST)) || cur.closing))
				return 0;
			seen->closing = 1;
			seen->entry = cur;
			if (dir == POLICY_DIR_INGRESS ||
			    !(cur.ends & (bit ^ (POLICY_CT_END_LO | POLICY_CT_END_HI))))
				policy_ct_close(&k, &cur, at, t,
						(bit == POLICY_CT_END_LO) ==
							(dir == POLICY_DIR_EGRESS));
			return 0;
		}
	}
	on = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS : POLICY_F_EGRESS;
	incomplete = dir == POLICY_DIR_INGRESS ? POLICY_F_INGRESS_INCOMPLETE
					       : POLICY_F_EGRESS_INCOMPLETE;
	peer = dir == POLICY_DIR_INGRESS ? t->saddr : t->daddr;
	/* The node's own traffic into an isolated pod (kubelet probes). */
	via = (t->flags & on) && dir == POLICY_DIR_INGRESS && from_host &&
			      (peer == node_ip || policy_host_address(peer))
		      ? POLICY_CT_HOST_PEER
		      : 0;
	if ((t->flags & on) && !via && !policy_allows(local, peer, t, dir))
		return (t->flags & incomplete) ? DROP_POLICY_MAP_FULL : DROP_POLICY_DENIED;
	/* Allowed (or this direction is open): track it, and its replies; a new
	 * entry only within its payer's budget. */
	opened = policy_ct_opener(bit, dir, t);
	if (!v && policy_ct_over_budget(opened ? t->saddr : local))
		return DROP_POLICY_CT_BUDGET;
	fresh = t->syn && fresh_also != POLICY_CT_MERGE;
	if (fresh)
		seen->fresh = bit;
	if (fresh && fresh_also == POLICY_CT_DEFER)
		return 0;
	/* Which check set this end's bit, and a deferred SYN's sender's
	 * (fresh_also: its egress check accepted it). */
	via |= policy_ct_via(bit, dir);
	if (fresh && fresh_also)
		via |= policy_ct_via(fresh_also, POLICY_DIR_EGRESS);
	policy_ct_track(&k, v, bit, (fresh ? fresh_also : 0) | opened, via, fresh, t->syn);
	return 0;
}

/*
 * policy_icmp_related says whether ICMP packet info, at local pod's check
 * of direction dir, is an error about a TCP or UDP connection whose local
 * end is tracked: quoting the pod's own packet (ingress: a router's
 * fragmentation needed, a peer's port unreachable) or one the pod received,
 * sent back to its sender (egress: the pod's port unreachable; to anyone
 * else it would carry what the pod likes past its policy). At ingress a
 * pod's error must come from the quoted packet's destination (pods are not
 * routers: another pod would reach it past its policy, as the quote's
 * payload is readable with IP_RECVERR). An error about a connection the
 * host's exemption let in (POLICY_CT_HOST_PEER) enters only from the host's
 * own stack (from_host): no router sits between the node and its pods, and
 * what else sends from that address is not this node. Nothing is written but the slot's
 * in-use marks (policy_ct_find_at); echo and other messages cost one byte's
 * read, errors a quote parse and a lookup. A function of its own: its stack
 * is not added to the deepest call chain (from_pod's, through
 * from_pod_deliver, is then at the 512-byte limit).
 */
static __noinline int policy_icmp_related(struct __sk_buff *skb, const struct ipv4_info *info,
					  __u32 local, __u8 dir, __u8 from_host)
{
	struct policy_ct_key k = {};
	__u32 bit;

	/* Errors are short (RFC 1812: at most 576 bytes) and not fragmented. */
	if (!info || !info->l4_off || info->frag || skb->len > ETH_HLEN + POLICY_ICMP_ERROR_MAX)
		return 0;
	{
		__u8 type = 0;

		if (bpf_skb_load_bytes(skb, info->l4_off, &type, 1) < 0 ||
		    (type != ICMP_DEST_UNREACH && type != ICMP_TIME_EXCEEDED))
			return 0;
	}
	{
		struct iphdr ip = {};
		__be16 ports[2];
		__u32 off;

		off = icmp_quote_ip(skb, info, &ip);
		if (!off || (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP) ||
		    (dir == POLICY_DIR_INGRESS ? ip.saddr : ip.daddr) != local ||
		    (dir == POLICY_DIR_EGRESS && ip.saddr != info->daddr) ||
		    (dir == POLICY_DIR_INGRESS && ip.daddr != info->saddr && cluster_cidr_mask &&
		     cluster_contains(info->saddr)) ||
		    bpf_skb_load_bytes(skb, off, ports, sizeof(ports)) < 0)
			return 0;
		/* The quoted packet went the other way: from local at ingress. */
		bit = policy_ct_key_set(&k, ip.saddr, ip.daddr, ports[0], ports[1], ip.protocol,
					dir == POLICY_DIR_INGRESS);
	}
	{
		struct policy_ct_entry cur = {};

		return policy_ct_find_at(&k, &cur) >= 0 && (cur.ends & bit) &&
		       (dir == POLICY_DIR_EGRESS || from_host || !(cur.ends & POLICY_CT_HOST_PEER));
	}
}

/*
 * policy_ingress is the ingress check of the packet info describes, entering
 * the local pod info->daddr (ep: its endpoint entry, or NULL to look the
 * flags up): 0 to go on, or the drop reason. from_host says the host's own
 * stack sent it (only then are the node's addresses exempt). vouched: the sender is a pod
 * whose source address a node checked (endpoint_vouched). bpf_delivered: BPF delivers
 * the packet (endpoint_deliver), so a SYN's entry starts afresh here with no
 * lookup: the sender is a pod of another node, or a pod of this node whose
 * egress check of this same packet allowed it and left the write to this
 * check (policy_tx_fresh: its end bit, written here with this end's; when
 * this end is not isolated, alone). What the stack delivers may come from a
 * pod of this node checked in an earlier program run: its SYN adds its bit
 * to the entry. A close segment whose entry the sender's check read
 * (POLICY_RX_CLOSING) is followed on that copy, without a lookup.
 */
static __always_inline int policy_ingress(struct __sk_buff *skb, struct ipv4_info *info,
					  const struct endpoint_info *ep, __u8 from_host,
					  __u8 bpf_delivered, __u8 vouched)
{
	struct policy_tuple t = {.saddr = info->saddr, .daddr = info->daddr, .proto = info->proto};
	const struct policy_ct_entry *known = NULL;
	struct policy_ct_seen seen = {};
	int reason;

	if (info->policy_rx_tracked == POLICY_RX_SELF)
		return 0;
	if (info->policy_rx_tracked == POLICY_RX_TRACKED) {
		/* Passed on the sender's lookup: so do its later fragments. */
		policy_frag_note(skb, info, FRAG_STAGE_POLICY_INGRESS, 1, from_host);
		return 0;
	}
	t.flags = policy_ep_flags(ep, info->daddr);
	if (!(t.flags & POLICY_F_ISOLATED)) {
		policy_tx_commit(info);
		return 0;
	}
	if (policy_frag_passed(skb, info, FRAG_STAGE_POLICY_INGRESS, from_host))
		return 0;
	if (info->proto == IPPROTO_ICMP &&
	    policy_icmp_related(skb, info, info->daddr, POLICY_DIR_INGRESS, from_host))
		return 0;
	t.vouched = vouched;
	if (!bpf_delivered && !from_host)
		t.in_ifindex = skb->ingress_ifindex;
	policy_l4(skb, info, &t);
	if (info->policy_rx_tracked == POLICY_RX_CLOSING)
		known = &info->policy_ct;
	reason = policy_enforce(&t, info->daddr, POLICY_DIR_INGRESS, from_host,
				bpf_delivered ? info->policy_tx_fresh : POLICY_CT_MERGE, known,
				&seen);
	policy_frag_note(skb, info, FRAG_STAGE_POLICY_INGRESS, !reason, from_host);
	return reason;
}

/*
 * policy_egress_begin notes what the egress check needs from a pod's packet
 * before the Service stage may translate it: the pod's isolation state
 * (ep: its endpoint entry, or NULL), its own address and source port, the
 * destination it sent the packet to (policy_egress's as_sent), and for ICMP
 * whether it is an error about a connection tracked for the pod
 * (policy_icmp_related, on the quote as the pod wrote it). It returns 0
 * when the pod is not isolated (no egress check).
 */
static __always_inline int policy_egress_begin(struct __sk_buff *skb, const struct ipv4_info *info,
					       const struct endpoint_info *ep,
					       struct policy_tuple *t)
{
	struct l4_head h = {};

	t->flags = policy_ep_flags(ep, info->saddr);
	if (!(t->flags & POLICY_F_ISOLATED))
		return 0;
	t->saddr = info->saddr;
	if (info->l4_off && (info->proto == IPPROTO_TCP || info->proto == IPPROTO_UDP ||
			     info->proto == IPPROTO_SCTP))
		l4_load_head(skb, info, &h, 4);
	t->sport = h.sport;
	t->daddr = info->daddr;
	t->dport = h.dport;
	/* Judged as the pod sent it: the Service stage may rewrite an error's
	 * quote (a NodePort backend's, back to the frontend the client used). */
	if (info->proto == IPPROTO_ICMP)
		t->related = policy_icmp_related(skb, info, info->saddr, POLICY_DIR_EGRESS, 0);
	return 1;
}

/*
 * policy_egress is the egress check after the Service stage: the pod's own
 * source (noted by policy_egress_begin) towards the translated destination
 * (a Service's backend). 0 to go on, or the drop reason. as_sent: the
 * Service stage translated a NodePort flow's reply back (LB_ROUTE_OUT), so
 * the check keeps the destination the pod sent it to: for a flow SNATed to
 * the node IP and a NAT port (np_reply), the connection as the pod's
 * ingress check tracked it, not the client np_reply turned it towards
 * (other replies keep their destination anyway). When the packet
 * still carries that source and its connection is tracked at the other end
 * as well (both pods of this node), info->policy_rx_tracked tells the
 * ingress check of this same packet (endpoint_deliver) to pass it without
 * a second lookup of the same entry; a segment of the connection's close,
 * which the ingress check follows (policy_enforce), gets the entry as read
 * here (info->policy_ct) instead of that lookup. A SYN it allows is not
 * written here: info->policy_tx_fresh hands its end bit on, so the
 * receiver's check writes the entry once, whole, with both bits
 * (policy_ct_track), and where no such check runs the caller writes it
 * (policy_tx_commit). Only a packet whose source the Service stage left
 * alone defers (the receiver's check then sees the same tuple).
 */
static __always_inline int policy_egress(struct __sk_buff *skb, struct ipv4_info *info,
					 struct policy_tuple *t, int as_sent)
{
	struct policy_tuple now = {};
	struct policy_ct_seen seen = {};
	__u32 rx_bit;
	int reason, same;

	if (t->related || policy_frag_passed(skb, info, FRAG_STAGE_POLICY_EGRESS, 0))
		return 0;
	/* An error the Service stage sent on to another destination (a
	 * ClusterIP client's, about a reply, now to the flow's backend:
	 * ct_icmp_error_to_backend) is about the connection as now quoted. */
	if (info->proto == IPPROTO_ICMP && info->daddr != t->daddr &&
	    policy_icmp_related(skb, info, t->saddr, POLICY_DIR_EGRESS, 0))
		return 0;
	policy_l4(skb, info, &now);
	if (!as_sent) {
		t->daddr = info->daddr;
		t->dport = now.dport;
	}
	t->proto = info->proto;
	t->syn = now.syn;
	t->tcp_flags = now.tcp_flags;
	t->ack = now.ack;
	t->fin_end = now.fin_end;
	same = t->saddr != t->daddr && t->saddr == info->saddr && t->sport == now.sport;
	reason = policy_enforce(t, t->saddr, POLICY_DIR_EGRESS, 0, same ? POLICY_CT_DEFER : 0, NULL,
				&seen);
	policy_frag_note(skb, info, FRAG_STAGE_POLICY_EGRESS, !reason, 0);
	if (reason || !same)
		return reason;
	info->policy_tx_fresh = seen.fresh;
	info->policy_tx_sport = t->sport;
	info->policy_tx_dport = t->dport;
	rx_bit = t->saddr < t->daddr ? POLICY_CT_END_HI : POLICY_CT_END_LO;
	if (!(seen.ends & rx_bit))
		return 0;
	info->policy_rx_tracked = seen.closing ? POLICY_RX_CLOSING : POLICY_RX_TRACKED;
	if (seen.closing)
		info->policy_ct = seen.entry;
	return 0;
}

#endif /* MYELIN_LIB_POLICY_H */
