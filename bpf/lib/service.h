/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service translation (kube-proxy replacement), all gated by lb_enabled:
 *
 *   - lb_from_pod: a pod's packet to a service frontend is DNATed to the
 *     flow's backend (hairpin flows also SNATed to LB_HAIRPIN_ADDR); a
 *     reply of a NodePort or hairpin flow leaving its backend pod is
 *     translated back (ct_reply_xlate).
 *   - lb_from_netdev: a NodePort request on the uplink is DNATed; to a
 *     backend on another node also SNATed to node_ip in the NodePort SNAT
 *     tables (lib/nodeport.h), whose replies np_reply translates back.
 *   - lb_reject answers a service without ready backends.
 *
 * The helpers return 0 to carry on (with *route saying how the packet goes
 * on) or a DROP_* reason; DROP_SVC_NO_BACKEND asks for lb_reject.
 */
#ifndef MYELIN_LIB_SERVICE_H
#define MYELIN_LIB_SERVICE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
#include "ct.h"
#include "endpoint.h"
#include "fib.h"
#include "icmp.h"
#include "lb.h"
#include "masq.h"
#include "nodeport.h"
#include "tunnel.h"
#include "verdict.h"

/* lb_route says how a packet goes on after the service helpers. */
enum lb_route {
	LB_ROUTE_NORMAL = 0, /* the program's usual delivery */
	LB_ROUTE_LOCAL = 1,  /* into a local pod, in both host routing modes (hairpin) */
	LB_ROUTE_OUT = 2,    /* tunnel or FIB in both modes: its source is node_ip (NodePort) */
};

/*
 * lb_flow_backend returns the backend of flow fwd to svc into *be: its
 * conntrack entry's while that backend exists, else a new choice
 * (lb_select), for which *fresh is set. Returns the backend id, 0 if none.
 */
static __always_inline __u32 lb_flow_backend(const struct ct_key *fwd, const struct lb_svc *svc,
					     struct lb_backend *be, int *fresh)
{
	const struct ct_entry *ct = ct_lookup(fwd);
	const struct lb_backend *b;
	__u32 id;

	if (ct) {
		id = ct->backend_id;
		b = lb_backend_lookup(id);
		if (b) {
			*be = *b;
			return id;
		}
	}
	id = lb_select(svc, fwd);
	b = id ? lb_backend_lookup(id) : NULL;
	if (!b)
		return 0;
	*be = *b;
	*fresh = 1;
	return id;
}

/* lb_dnat rewrites the destination to be (l4 and info follow). */
static __always_inline int lb_dnat(struct __sk_buff *skb, struct ipv4_info *info,
				   struct l4_info *l4, const struct lb_backend *be)
{
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, be->addr) < 0 ||
	    l4_rewrite_port(skb, l4, l4->rport_off, l4->dport, be->port) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = be->addr;
	l4->dport = be->port;
	return 0;
}

/*
 * lb_pod_service translates a pod's packet to frontend svc: DNAT to the
 * flow's backend and, when that is the pod itself, SNAT to LB_HAIRPIN_ADDR
 * (the client port stays) with delivery straight back into the pod.
 */
static __always_inline int lb_pod_service(struct __sk_buff *skb, struct ipv4_info *info,
					  struct l4_info *l4, const struct lb_svc *svc, int *route)
{
	struct lb_backend be = {};
	struct ct_key fwd;
	int fresh = 0, hairpin;
	__u32 id;

	ct_key_of(&fwd, info, l4, CT_DIR_FORWARD);
	id = lb_flow_backend(&fwd, svc, &be, &fresh);
	if (!id)
		return DROP_SVC_NO_BACKEND;
	hairpin = be.addr == info->saddr;
	/* A SYN writes both entries again: a direct connection on the same ports
	 * may have cleared the reverse one (ct_forget_stale_reply). */
	if (fresh || l4->tcp_opening)
		ct_create(&fwd, id, be.addr, be.port, hairpin ? LB_HAIRPIN_ADDR : info->saddr,
			  hairpin ? CT_F_HAIRPIN : 0);
	if (hairpin) {
		if (l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, LB_HAIRPIN_ADDR) < 0)
			return DROP_INVALID_PACKET;
		info->saddr = LB_HAIRPIN_ADDR;
		*route = LB_ROUTE_LOCAL;
	}
	return lb_dnat(skb, info, l4, &be);
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
	if (ct_l4_parse(skb, info, &l4) < 0)
		return 0;
	svc = lb_svc_lookup(info->daddr, l4.dport, info->proto);
	if (svc)
		return lb_pod_service(skb, info, &l4, svc, route);
	reason = ct_reply_xlate(skb, info, &l4, &flags);
	if (flags & CT_F_HAIRPIN)
		*route = LB_ROUTE_LOCAL;
	else if (flags & CT_F_NODEPORT)
		*route = LB_ROUTE_OUT;
	return reason;
}

/*
 * lb_nodeport serves a NodePort request arriving on the uplink: DNAT to the
 * flow's backend; the client address stays for a local backend (delivered
 * as usual, service conntrack as for ClusterIP), while for a backend on
 * another node the source becomes node_ip too (as kube-proxy does), so its
 * reply returns through this node. Those flows live in the NodePort SNAT
 * tables (lib/nodeport.h), looked up first, and write no myelin_lb_ct entry.
 */
static __always_inline int lb_nodeport(struct __sk_buff *skb, struct ipv4_info *info,
				       struct l4_info *l4, const struct lb_svc *svc, int *route)
{
	struct nat_key npkey = {
		.saddr = info->saddr,
		.daddr = info->daddr,
		.sport = l4->sport,
		.dport = l4->dport,
		.proto = info->proto,
		.dir = NAT_DIR_EGRESS,
	};
	struct lb_backend be = {};
	struct np_entry flow;
	struct ct_key fwd;
	int fresh = 0, reason;
	__u32 id;

	reason = np_flow(skb, info, l4, &npkey, &flow);
	if (reason == 1) {
		ct_key_of(&fwd, info, l4, CT_DIR_FORWARD);
		id = lb_flow_backend(&fwd, svc, &be, &fresh);
		if (!id)
			return DROP_SVC_NO_BACKEND;
		if (endpoint_lookup(be.addr)) {
			if (fresh)
				ct_create(&fwd, id, be.addr, be.port, info->saddr, CT_F_NODEPORT);
			return lb_dnat(skb, info, l4, &be);
		}
		reason = np_create(&npkey, id, &be, l4->tcp_closing ? NAT_F_CLOSING : 0, &flow);
	}
	if (reason)
		return reason;
	*route = LB_ROUTE_OUT;
	return np_snat(skb, info, l4, &flow);
}

/*
 * lb_from_netdev handles the service side of a packet to node_ip arriving
 * on the uplink, after masq_ingress: a NodePort request (still to node_ip)
 * or the reply of a NodePort flow served on another node (masq_ingress
 * restored the client as its destination), which gets the NodePort
 * frontend back as its source.
 */
static __always_inline int lb_from_netdev(struct __sk_buff *skb, struct ipv4_info *info, int *route)
{
	struct l4_info l4 = {};
	const struct lb_svc *svc;
	__u16 flags = 0;
	int reason;

	if (!lb_enabled || ct_l4_parse(skb, info, &l4) < 0)
		return 0;
	if (info->daddr == node_ip) {
		reason = np_reply(skb, info, &l4);
		if (reason != 1) {
			*route = LB_ROUTE_OUT;
			return reason;
		}
		svc = lb_svc_lookup(info->daddr, l4.dport, info->proto);
		if (svc && (svc->flags & LB_SVC_F_NODEPORT))
			return lb_nodeport(skb, info, &l4, svc, route);
		return 0;
	}
	reason = ct_reply_xlate(skb, info, &l4, &flags);
	if (flags & CT_F_NODEPORT)
		*route = LB_ROUTE_OUT;
	return reason;
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
 * DROP_SVC_NO_BACKEND drop, with its event, before it is rewritten.
 */
static __always_inline int lb_reject(struct __sk_buff *skb, struct ipv4_info *info, __u8 dir)
{
	verdict_count_drop(skb, info, dir, DROP_SVC_NO_BACKEND);
	if (icmp_port_unreach(skb, info) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

#endif /* MYELIN_LIB_SERVICE_H */
