/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service translation (kube-proxy replacement), all gated by lb_enabled:
 *
 *   - lb_from_pod: a pod's packet to a service frontend is DNATed to the
 *     flow's backend (hairpin flows also SNATed to LB_HAIRPIN_ADDR); a
 *     reply of a NodePort or hairpin flow leaving its backend pod is
 *     translated back (ct_reply_xlate).
 *   - lb_from_netdev: a NodePort request on the uplink is DNATed; to a
 *     local backend with conntrack that awaits the backend's answer
 *     (lib/nodeport_ct.h); to a backend on another node also SNATed to
 *     node_ip in the NodePort SNAT tables (lib/nodeport.h), whose replies
 *     np_reply translates back.
 *   - lb_reject answers a service without ready backends (rate-limited).
 *   - ICMP errors about a service flow's packets are translated back to
 *     what the client sent (lb_icmp_reply, ct_icmp_error_xlate; NodePort
 *     SNAT flows: np_icmp_error), and later
 *     fragments get their first fragment's translation (lb_pod_stage,
 *     lb_netdev_stage, lib/frag.h).
 *
 * The helpers return 0 to carry on (with *route saying how the packet goes
 * on) or a DROP_* reason; DROP_SVC_NO_BACKEND asks for lb_reject.
 */
#ifndef MYELIN_LIB_SERVICE_H
#define MYELIN_LIB_SERVICE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "budget.h"
#include "clock.h"
#include "config.h"
#include "ct.h"
#include "endpoint.h"
#include "fib.h"
#include "frag.h"
#include "icmp.h"
#include "lb.h"
#include "lb_flow.h"
#include "masq.h"
#include "nodeport.h"
#include "nodeport_ct.h"
#include "nodeport_reply.h"
#include "tunnel.h"
#include "verdict.h"

/* lb_route says how a packet goes on after the service helpers. */
enum lb_route {
	LB_ROUTE_NORMAL = 0, /* the program's usual delivery */
	LB_ROUTE_LOCAL = 1,  /* into a local pod, in both host routing modes (hairpin) */
	LB_ROUTE_OUT = 2,    /* tunnel or FIB in both modes: its source is node_ip (NodePort) */
};

/* lb_dnat rewrites the destination to be (l4 and info follow). */
static __always_inline int lb_dnat(struct __sk_buff *skb, struct ipv4_info *info,
				   struct l4_info *l4, const struct lb_backend *be)
{
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, be->addr) < 0 ||
	    l4_rewrite_port(skb, l4, l4->rport_off, l4->dport, be->port) < 0)
		return DROP_INVALID_PACKET;
	info->svc_addr = info->daddr; /* for the flow record (lib/flows.h) */
	info->svc_port = l4->dport;
	info->daddr = be->addr;
	l4->dport = be->port;
	return 0;
}

/* lb_ct_over_budget says whether pod addr may not open another Service flow:
 * the list is looked up only while it holds a pod (myelin_budgets). */
static __always_inline int lb_ct_over_budget(__u32 addr)
{
	return lb_ct_budget && budget_any_over(BUDGET_LB_CT) &&
	       bpf_map_lookup_elem(&myelin_lb_ct_over, &addr);
}

/*
 * lb_pod_service translates a pod's packet to frontend svc: DNAT to the
 * flow's backend and, when that is the pod itself, SNAT to LB_HAIRPIN_ADDR
 * (the client port stays) with delivery straight back into the pod.
 */
static __always_inline int lb_pod_service(struct __sk_buff *skb, struct ipv4_info *info,
					  struct l4_info *l4, const struct lb_svc *svc, int *route)
{
	struct lb_flow f = {};
	struct ct_key fwd;
	int hairpin, reason;

	ct_key_of(&fwd, info, l4, CT_DIR_FORWARD);
	if (!lb_flow_backend(ct_lookup(&myelin_lb_ct, &fwd), &fwd, svc, l4, &f, LB_CLIENT_NODE))
		return DROP_SVC_NO_BACKEND;
	if (!f.ct && lb_ct_over_budget(info->saddr))
		return DROP_SVC_CT_BUDGET;
	hairpin = f.be.addr == info->saddr;
	/* A SYN writes both entries again: a direct connection on the same ports
	 * may have cleared the reverse one (ct_forget_stale_reply). */
	reason = lb_flow_commit(&myelin_lb_ct, &fwd, &f, svc, l4, hairpin ? CT_F_HAIRPIN : 0, 0);
	if (reason)
		return reason;
	if (hairpin) {
		if (l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, LB_HAIRPIN_ADDR) < 0)
			return DROP_INVALID_PACKET;
		info->saddr = LB_HAIRPIN_ADDR;
		*route = LB_ROUTE_LOCAL;
	}
	return lb_dnat(skb, info, l4, &f.be);
}

/*
 * lb_icmp_reply translates an ICMP error about a service flow leaving here
 * (ct_icmp_error_xlate) and says how it goes on, as for the flow's replies.
 * from_pod: a pod sent it, which may also be a client's error about a reply
 * of its own ClusterIP flow (ct_icmp_error_to_backend).
 */
static __always_inline int lb_icmp_reply(struct __sk_buff *skb, struct ipv4_info *info, int *route,
					 __u8 from_pod)
{
	struct l4_info l4 = {};
	__u16 flags = 0;
	int reason;

	if (l4_parse(skb, info, &l4) < 0)
		return 0;
	/* As for replies: hairpin flows are pods' own, the rest NodePort flows. */
	if (info->daddr == LB_HAIRPIN_ADDR)
		reason = ct_icmp_error_xlate(&myelin_lb_ct, NULL, skb, info, &l4, &flags);
	else
		reason = ct_icmp_error_xlate(&myelin_lb_ct_nodeport, &myelin_lb_ct_nodeport_syn,
					     skb, info, &l4, &flags);
	if (from_pod && !reason && !flags)
		return ct_icmp_error_to_backend(&myelin_lb_ct, skb, info, &l4);
	if (flags & CT_F_HAIRPIN)
		*route = LB_ROUTE_LOCAL;
	else if (flags & CT_F_NODEPORT)
		*route = LB_ROUTE_OUT;
	return reason;
}

/*
 * lb_from_pod handles the service side of a packet leaving a pod: a
 * frontend is translated to its backend; a reply of a NodePort flow (to a
 * client outside the cluster) or of a hairpin flow (to LB_HAIRPIN_ADDR) is
 * translated back. Destinations in the cluster CIDR are neither, which the
 * constants answer without a map lookup (pod to pod; only a TCP SYN clears a
 * stale reply translation, ct_forget_stale_reply). Replies to pods of
 * ClusterIP flows are translated where they enter the client pod.
 */
static __always_inline int lb_from_pod(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	struct l4_info l4 = {};
	const struct lb_svc *svc;
	__u16 flags = 0;
	int reason;

	if (!lb_enabled)
		return 0;
	if (cluster_contains(info->daddr)) {
		ct_forget_stale_reply(skb, info);
		return 0;
	}
	if (info->proto == IPPROTO_ICMP)
		return lb_icmp_reply(skb, info, route, 1);
	if (ct_l4_parse(skb, info, &l4) < 0)
		return 0;
	/* A local backend's reply to a NodePort SNAT flow (a client pod of
	 * another node, lb_nodeport): only packets to node_ip pay, and only
	 * those to a port of the NAT range a lookup. */
	if (info->daddr == node_ip) {
		reason = np_reply(skb, info, &l4);
		if (reason != 1) {
			*route = LB_ROUTE_OUT;
			return reason;
		}
	}
	svc = lb_svc_lookup(info->daddr, l4.dport, info->proto);
	if (svc)
		return lb_pod_service(skb, info, &l4, svc, route);
	/* Replies to outside clients are NodePort flows, from a backend's port
	 * (myelin_lb_ports: a pod's own connections out pay a bit test, no
	 * lookup); to the hairpin address, pods' own. */
	if (info->daddr == LB_HAIRPIN_ADDR)
		reason = ct_reply_xlate(&myelin_lb_ct, skb, info, &l4, &flags, 0);
	else if (ct_from_backend_port(l4.sport))
		reason = np_ct_reply_xlate(skb, info, &l4, &flags, 1);
	else
		return 0;
	if (flags & CT_F_HAIRPIN)
		*route = LB_ROUTE_LOCAL;
	else if (flags & CT_F_NODEPORT)
		*route = LB_ROUTE_OUT;
	return reason;
}

/*
 * lb_host_replies: set (by lb_nodeport) once a NodePort flow was served by
 * this node's own host (a hostNetwork backend), whose replies the stack
 * sends out of the uplink, where myelin_to_netdev then translates them back
 * (lb_host_reply). Until then the node's own packets leaving it pay no
 * lookup. Not pinned: after an agent restart, the next request of such a
 * flow sets it again.
 */
volatile __u32 lb_host_replies = 0;

/*
 * lb_nodeport serves a NodePort request arriving on the uplink: DNAT to the
 * flow's backend; the client address stays for a local backend (delivered
 * as usual, service conntrack as for ClusterIP, but kept in an LRU until
 * the backend answers: lib/nodeport_ct.h), while for a backend on
 * another node, or a client that is a pod of another node, the source
 * becomes node_ip too (as kube-proxy does), so the reply returns through
 * this node's NodePort SNAT (from_netdev, or lb_from_pod for a local
 * backend). Those flows live in the NodePort SNAT tables (lib/nodeport.h),
 * looked up first, and write no conntrack entry.
 * A backend at node_ip (a hostNetwork pod of this node) is local whoever
 * the client: SNAT would make the request a packet from the node's own
 * address arriving from outside, which the stack drops as a martian. Its
 * replies leave through the stack and the uplink (lb_host_reply).
 * Its clients are outside the node (LB_CLIENT_EXTERNAL): with
 * externalTrafficPolicy Local only the node's own backends serve them.
 */
static __always_inline int lb_nodeport(struct __sk_buff *skb, struct ipv4_info *info,
				       struct l4_info *l4, const struct lb_svc *svc, int *route)
{
	int reason, host, promoted;
	struct l4_info kept;
	struct nat_key npkey;
	struct lb_flow f = {};
	struct np_entry flow;
	struct ct_entry *ct;
	struct ct_key fwd;

	nat_key_of(&npkey, info, l4, NAT_DIR_EGRESS);
	reason = np_flow(skb, info, l4, &npkey, &flow);
	if (reason == 1) {
		ct_key_of(&fwd, info, l4, CT_DIR_FORWARD);
		ct = np_ct_find(&fwd, &promoted);
		if (!lb_flow_backend(ct, &fwd, svc, np_ct_keep(l4, ct, svc, promoted, &kept), &f,
				     LB_CLIENT_EXTERNAL))
			return DROP_SVC_NO_BACKEND;
		/* A pod of another node as the client (in the cluster CIDR, which
		 * lb_from_pod sends on untranslated) is served as if a pod backend
		 * were remote: SNAT, so the reply comes back to node_ip. */
		host = f.be.addr == node_ip;
		if (host && !lb_host_replies)
			lb_host_replies = 1;
		if (host || (endpoint_lookup(f.be.addr) && !cluster_contains(info->saddr))) {
			reason = np_ct_commit(skb, info, l4, svc, &fwd, &f, promoted ? ct : NULL);
			return reason ? reason : lb_dnat(skb, info, l4, &f.be);
		}
		/* Now to a backend on another node: a local flow of the tuple is over. */
		if (promoted)
			np_ct_forget(&fwd, ct);
		reason = np_create(&npkey, f.id, &f.be, l4, np_client_isn(skb, info, l4), &flow);
	}
	if (reason)
		return reason;
	*route = LB_ROUTE_OUT;
	return np_snat(skb, info, l4, &flow);
}

/*
 * lb_from_netdev handles the service side of a packet to node_ip arriving
 * on the uplink, after masq_ingress: a NodePort request, or the reply of a
 * NodePort SNAT flow (np_reply). An ICMP error to node_ip about a NodePort
 * SNAT flow goes back to its client (np_icmp_error). A masqueraded flow's
 * reply (masq_ingress restored its pod as the destination) is no Service
 * reply: NodePort conntrack holds flows to local backends only, whose
 * replies leave a pod or the node, never arrive here.
 */
static __always_inline int lb_from_netdev(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	struct l4_info l4 = {};
	const struct lb_svc *svc;
	int reason;

	if (!lb_enabled)
		return 0;
	if (info->proto == IPPROTO_ICMP) {
		if (info->daddr != node_ip)
			return lb_icmp_reply(skb, info, route, 0);
		/* Errors about NodePort SNAT flows go out to the client as their
		 * replies do; the rest are the node's own (or masquerade's, done). */
		reason = np_icmp_error(skb, info);
		if (reason == 1)
			return 0;
		*route = LB_ROUTE_OUT;
		return reason;
	}
	if (info->daddr != node_ip || ct_l4_parse(skb, info, &l4) < 0)
		return 0;
	reason = np_reply(skb, info, &l4);
	if (reason != 1) {
		*route = LB_ROUTE_OUT;
		return reason;
	}
	/* The node's own traffic: no NodePort at its port, no lookup. */
	if (!lb_port_marked(&myelin_lb_nodeports, l4.dport))
		return 0;
	svc = lb_svc_lookup(info->daddr, l4.dport, info->proto);
	if (svc && (svc->flags & LB_SVC_F_NODEPORT))
		return lb_nodeport(skb, info, &l4, svc, route);
	return 0;
}

/*
 * lb_host_reply translates a packet the node's own stack sends out of the
 * uplink back if it is the reply of a NodePort flow this host serves (a
 * hostNetwork backend, lb_nodeport): its source becomes the NodePort
 * frontend. Only the node's own packets pay, and only once such a flow was
 * seen (lb_host_replies), from a port a backend uses (myelin_lb_ports):
 * a bit test, then conntrack lookups. 0 or a DROP_* reason.
 */
static __always_inline int lb_host_reply(struct __sk_buff *skb, struct ipv4_info *info)
{
	struct l4_info l4 = {};
	__u16 flags = 0;

	if (!lb_enabled || !lb_host_replies || info->saddr != node_ip ||
	    ct_l4_parse(skb, info, &l4) < 0 || !ct_from_backend_port(l4.sport))
		return 0;
	return np_ct_reply_xlate(skb, info, &l4, &flags, 1);
}

/*
 * lb_forward_out sends a NodePort packet (source node_ip) towards its
 * destination in both host routing modes: the stack would drop it as a
 * martian, a packet from one of its own addresses arriving from outside.
 * Tunnel mode takes the overlay for pods of other nodes, else the FIB.
 */
static __always_inline int lb_forward_out(struct __sk_buff *skb, struct ipv4_info *info, __u8 dir)
{
	const struct tunnel_endpoint *te;

	if (routing_tunnel) {
		te = tunnel_lookup(info->daddr);
		if (te)
			return tunnel_encap_redirect(skb, info, dir, te);
	}
	return fib_forward(skb, info, dir);
}

/*
 * lb_reject answers a packet to a service without ready backends with ICMP
 * port unreachable, sent back out of the device it came in on (into the
 * pod through its veth, or out of the uplink). The packet counts as a
 * DROP_SVC_NO_BACKEND drop, with its event, before it is rewritten. A CPU
 * answers at most ICMP_REJECT_RATE a second; the rest are only dropped.
 */
static __always_inline int lb_reject(struct __sk_buff *skb, struct ipv4_info *info, __u8 dir)
{
	verdict_count_drop(skb, info, dir, DROP_SVC_NO_BACKEND);
	/* Over the rate (icmp_reject_allowed): dropped, counted, unanswered. */
	if (!icmp_reject_allowed() || icmp_port_unreach(skb, info) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

/*
 * lb_pod_stage is lb_from_pod for fragmented datagrams too: a later
 * fragment to a destination outside the cluster CIDR gets the addresses
 * (and route) its first fragment got, which lb_from_pod recorded. Whole
 * datagrams pay one test of info->frag.
 */
static __always_inline int lb_pod_stage(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	__be32 saddr = info->saddr, daddr = info->daddr;
	int hit = 0, reason;

	if (!lb_enabled || cluster_contains(info->daddr))
		return lb_from_pod(skb, info, route);
	if (ipv4_later_frag(info))
		return frag_follow(skb, info, FRAG_STAGE_FROM_POD, route, &hit);
	reason = lb_from_pod(skb, info, route);
	if (!reason)
		frag_note(skb, info, saddr, daddr, FRAG_STAGE_FROM_POD, *route);
	return reason;
}

/*
 * lb_netdev_stage translates a packet arriving on the uplink: masquerade
 * and NodePort SNAT replies (masq_ingress), then, for packets to node_ip,
 * NodePort requests and replies (lb_from_netdev). A later fragment to
 * node_ip gets the addresses (and route) its first fragment got; one
 * without is the node's own and goes on untouched.
 */
static __always_inline int lb_netdev_stage(struct __sk_buff *skb, struct ipv4_info *info,
					   int *route)
{
	__be32 saddr = info->saddr, daddr = info->daddr;
	int hit = 0, reason;

	if (daddr != node_ip || (!masq_enabled && !lb_enabled))
		return masq_ingress(skb, info);
	if (ipv4_later_frag(info))
		return frag_follow(skb, info, FRAG_STAGE_FROM_NETDEV, route, &hit);
	reason = masq_ingress(skb, info);
	if (!reason)
		reason = lb_from_netdev(skb, info, route);
	if (!reason)
		frag_note(skb, info, saddr, daddr, FRAG_STAGE_FROM_NETDEV, *route);
	return reason;
}

#endif /* MYELIN_LIB_SERVICE_H */
