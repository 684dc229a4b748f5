/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * BPF masquerade: pod traffic leaving the cluster takes the node's IP as its
 * source on the uplink's egress (masq_egress), and its replies, including
 * ICMP errors about it, get the pod's address back on the uplink's ingress
 * (masq_ingress). TCP, UDP and ICMP echo are translated; everything else
 * leaves untouched. Both return 0 to carry on, or the DROP_* reason to drop
 * with; a translated packet's info carries its new addresses.
 */
#ifndef MYELIN_LIB_MASQ_H
#define MYELIN_LIB_MASQ_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
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
	struct nat_key fwd = {
		.saddr = info->saddr,
		.daddr = info->daddr,
		.sport = l4->sport,
		.dport = l4->dport,
		.proto = info->proto,
		.dir = NAT_DIR_EGRESS,
	};
	__u16 flags = l4->tcp_closing ? NAT_F_CLOSING : 0;
	struct nat_entry *e;
	__be32 nat_addr;
	__be16 nat_port;
	int reason;

	e = nat_lookup(&fwd);
	if (e) {
		nat_touch(e, flags);
		nat_addr = e->addr;
		nat_port = e->port;
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
 * the flow's NAT port. Later fragments carry no ports and leave untouched.
 */
static __always_inline int masq_egress(struct __sk_buff *skb, struct ipv4_info *info)
{
	struct l4_info l4 = {};

	if (!masq_enabled || !masq_wanted(info) || l4_parse(skb, info, &l4) < 0)
		return 0;
	if (info->proto == IPPROTO_ICMP && l4.icmp_type != ICMP_ECHO)
		return 0;
	return masq_snat(skb, info, &l4);
}

/*
 * masq_icmp_error restores an ICMP error (destination unreachable, including
 * fragmentation needed, or time exceeded) about a translated packet: the
 * outer destination, the embedded header's source address and port (or echo
 * id) go back to the pod's. Checksums: the outer IPv4 one and the embedded
 * IPv4 one are patched for the address; the ICMP one only for the port,
 * because an address and the checksum of its own header change by opposite
 * amounts and cancel in the ICMP sum. The embedded L4 checksum is left as it
 * was: it covers a whole packet the error only quotes, and no stack checks it.
 */
static __always_inline int masq_icmp_error(struct __sk_buff *skb, struct ipv4_info *info,
					   const struct l4_info *l4)
{
	__u32 inner = info->l4_off + sizeof(struct icmp_echo_hdr);
	struct iphdr ip;
	struct l4_info in = {.csum_off = l4->csum_off};
	__be16 ports[2];
	const struct nat_entry *e;
	__be32 pod_addr;
	__be16 pod_port;
	__u32 port_off;

	if (bpf_skb_load_bytes(skb, inner, &ip, sizeof(ip)) < 0)
		return 0;
	if (ip.version != 4 || ip.ihl < 5 || ip.saddr != info->daddr ||
	    (ip.frag_off & bpf_htons(IPV4_FRAG_OFFSET_MASK)))
		return 0;
	port_off = inner + ip.ihl * 4;

	struct nat_key rev = {.saddr = ip.daddr, .daddr = ip.saddr, .proto = ip.protocol};

	rev.dir = NAT_DIR_INGRESS;
	if (ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) {
		if (bpf_skb_load_bytes(skb, port_off, ports, sizeof(ports)) < 0)
			return 0;
		rev.sport = ports[1];
		rev.dport = ports[0];
	} else if (ip.protocol == IPPROTO_ICMP) {
		struct icmp_echo_hdr ih;

		if (bpf_skb_load_bytes(skb, port_off, &ih, sizeof(ih)) < 0 || ih.type != ICMP_ECHO)
			return 0;
		port_off += ICMP_ID_OFF;
		rev.dport = ih.id;
	} else {
		return 0;
	}
	e = nat_lookup(&rev);
	if (!e)
		return 0;
	pod_addr = e->addr;
	pod_port = e->port;

	/* in: the ICMP checksum, no pseudo header; l4: likewise for the outer address. */
	if (l4_rewrite_addr(skb, l4, IPV4_DADDR_OFF, info->daddr, pod_addr) < 0 ||
	    bpf_skb_store_bytes(skb, inner + offsetof(struct iphdr, saddr), &pod_addr,
				sizeof(pod_addr), 0) < 0 ||
	    bpf_l3_csum_replace(skb, inner + offsetof(struct iphdr, check), ip.saddr, pod_addr,
				sizeof(pod_addr)) < 0 ||
	    l4_rewrite_port(skb, &in, port_off, rev.dport, pod_port) < 0)
		return DROP_INVALID_PACKET;
	info->daddr = pod_addr;
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
