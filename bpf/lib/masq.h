/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * BPF masquerade: pod traffic leaving the cluster takes the node's IP as its
 * source on the uplink's egress (masq_egress), and its replies, including
 * ICMP errors about it, get the pod's address back on the uplink's ingress
 * (masq_ingress). TCP, UDP and ICMP echo are translated; everything else
 * leaves untouched, and so do a pod's TCP replies to connections from
 * outside (a flow's first segment without SYN is never translated). Both
 * return 0 to carry on, or the DROP_* reason to drop with; a translated
 * packet's info carries its new addresses.
 */
#ifndef MYELIN_LIB_MASQ_H
#define MYELIN_LIB_MASQ_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
#include "frag.h"
#include "icmp.h"
#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "nat.h"

/* masq_wanted says whether a packet from saddr to daddr leaves the cluster as a pod's. */
static __always_inline int masq_wanted(const struct ipv4_info *info)
{
	struct nomasq_key key = {.prefixlen = 32, .addr = info->daddr};

	if (!cluster_contains(info->saddr))
		return 0;
	/* Pod to pod, the hot path: answered by the constants, no map lookup. */
	if (cluster_contains(info->daddr))
		return 0;
	return !bpf_map_lookup_elem(&myelin_nomasq, &key);
}

/*
 * masq_snat translates the source of a TCP, UDP or ICMP echo packet (l4 as
 * l4_parse filled it) to node_ip and the flow's NAT port, creating the
 * flow's NAT entries (lib/nat.h) on its first packet; masq_ingress
 * translates the replies back. Returns 0 or a DROP_* reason.
 */
static __always_inline int masq_snat(struct __sk_buff *skb, struct ipv4_info *info,
				     const struct l4_info *l4)
{
	struct nat_key fwd;
	__u16 flags = l4->tcp_closing ? NAT_F_CLOSING : 0;
	struct nat_entry *e;
	__be32 nat_addr;
	__be16 nat_port;
	int reason;

	nat_key_of(&fwd, info, l4, NAT_DIR_EGRESS);
	e = nat_lookup(&fwd);
	if (e) {
		nat_touch(e, flags);
		nat_addr = e->addr;
		nat_port = e->port;
	} else if (info->proto == IPPROTO_TCP && !l4->tcp_opening) {
		/*
		 * A TCP segment of no flow this node opened: the pod answers a
		 * connection from outside (an apiserver that is no Node
		 * reaching a pod, say). The client knows the pod's address;
		 * a translated reply would reach it from an unknown tuple.
		 */
		return 0;
	} else {
		nat_addr = node_ip;
		reason = nat_create(&fwd, nat_addr, flags, &nat_port);
		if (reason)
			return reason;
	}
	if (l4_rewrite_addr(skb, l4, IPV4_SADDR_OFF, info->saddr, nat_addr) < 0 ||
	    l4_rewrite_port(skb, l4, l4->port_off, l4->sport, nat_port) < 0)
		return DROP_INVALID_PACKET;
	info->saddr = nat_addr;
	return 0;
}

/*
 * masq_egress translates a pod's packet to a destination outside
 * myelin_nomasq: source address to node_ip, source port (ICMP echo: id) to
 * the flow's NAT port. A later fragment gets the addresses its first
 * fragment got (frag.h); a TCP or UDP one whose first fragment was not seen
 * is dropped as DROP_FRAG_NO_FLOW: its first fragment, translated, can
 * never be reassembled with it, and it would leak the pod's address.
 */
static __always_inline int masq_egress(struct __sk_buff *skb, struct ipv4_info *info)
{
	__be32 saddr = info->saddr, daddr = info->daddr;
	int route = 0, hit = 0, reason;
	struct l4_info l4 = {};

	if (!masq_enabled || !masq_wanted(info))
		return 0;
	if (ipv4_later_frag(info)) {
		reason = frag_follow(skb, info, FRAG_STAGE_TO_NETDEV, &route, &hit);
		if (!reason && !hit && (info->proto == IPPROTO_TCP || info->proto == IPPROTO_UDP))
			return DROP_FRAG_NO_FLOW;
		return reason;
	}
	if (l4_parse(skb, info, &l4) < 0)
		return 0;
	if (info->proto == IPPROTO_ICMP && l4.icmp_type != ICMP_ECHO)
		return 0;
	reason = masq_snat(skb, info, &l4);
	if (!reason)
		frag_note(skb, info, saddr, daddr, FRAG_STAGE_TO_NETDEV, 0);
	return reason;
}

/*
 * masq_icmp_error restores an ICMP error (destination unreachable, including
 * fragmentation needed, or time exceeded) about a translated packet: the
 * outer destination, the quoted header's source address and port (or echo
 * id) go back to the pod's (icmp_error_redirect).
 */
static __always_inline int masq_icmp_error(struct __sk_buff *skb, struct ipv4_info *info,
					   const struct l4_info *l4)
{
	struct icmp_quote q = {};
	const struct nat_entry *e;

	/* From a pod address only the quoted destination's own (np_icmp_error). */
	if (icmp_quote_parse(skb, info, &q) < 0 || q.ip.saddr != info->daddr ||
	    (cluster_contains(info->saddr) && info->saddr != q.ip.daddr))
		return 0;

	struct nat_key rev;

	icmp_quote_reply_key(&rev, &q);

	e = nat_lookup(&rev);
	if (!e)
		return 0;
	if (icmp_error_redirect(skb, info, l4, &q, e->addr, e->port) < 0)
		return DROP_INVALID_PACKET;
	return 0;
}

/*
 * masq_ingress translates a reply to a masqueraded flow (a packet to node_ip
 * matching a reverse entry of myelin_snat) back to the pod: destination
 * address and port (ICMP echo reply: id). ICMP errors about such flows go to
 * masq_icmp_error. Packets without an entry are the node's own and untouched.
 * NodePort flows forwarded to another node have tables of their own
 * (lib/nodeport.h, np_reply).
 */
static __always_inline int masq_ingress(struct __sk_buff *skb, struct ipv4_info *info)
{
	struct l4_info l4 = {};
	struct nat_entry *e;
	__be32 pod_addr;
	__be16 pod_port;

	if (!masq_enabled || info->daddr != node_ip || l4_parse(skb, info, &l4) < 0)
		return 0;
	if (info->proto == IPPROTO_ICMP) {
		if (l4.icmp_type == ICMP_DEST_UNREACH || l4.icmp_type == ICMP_TIME_EXCEEDED)
			return masq_icmp_error(skb, info, &l4);
		if (l4.icmp_type != ICMP_ECHOREPLY)
			return 0;
	}
	/* Translated flows all have a port (echo id) of nat_port_min..nat_port_max
	 * (nat_pick_port): a packet to another port, such as the node's own
	 * traffic, is no reply of one and costs no lookup. */
	if (bpf_ntohs(l4.dport) < nat_port_min || bpf_ntohs(l4.dport) > nat_port_max)
		return 0;

	struct nat_key rev = {
		.saddr = info->saddr,
		.daddr = info->daddr,
		.sport = l4.sport,
		.dport = l4.dport,
		.proto = info->proto,
		.dir = NAT_DIR_INGRESS,
	};

	e = nat_lookup(&rev);
	if (!e)
		return 0;
	nat_touch(e, NAT_F_REPLIED | (l4.tcp_closing ? NAT_F_CLOSING : 0));
	pod_addr = e->addr;
	pod_port = e->port;
	if (l4_rewrite_addr(skb, &l4, IPV4_DADDR_OFF, info->daddr, pod_addr) < 0 ||
	    l4_rewrite_port(skb, &l4, l4.rport_off, l4.dport, pod_port) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = pod_addr;
	return 0;
}

#endif /* MYELIN_LIB_MASQ_H */
