/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Source validation of what a pod sends (myelin_from_pod), before any lookup
 * that could act on the packet. A pod is untrusted: the veth it sends on
 * belongs to exactly one endpoint, which owns one IPv4 address and one MAC.
 * IPv4 must come from that address and MAC, ARP must announce them; anything
 * else (IPv6, router advertisements included, other ethertypes) is dropped.
 *
 * A pod's IPIP, 6in4 or GRE packet to a cluster address or to any address of
 * this node is dropped too: a decapsulating device on a node that myelin did
 * not make (tunl0, sit0, gre0) would unwrap it and route its inner packet,
 * from any source, to the node's pods (source_check_tunnel).
 *
 * Cost: one myelin_endpoints lookup per IPv4 packet (keyed by the source
 * address), a compare of the ingress ifindex and of the Ethernet source, a
 * test of the IP protocol (a myelin_nomasq lookup and a FIB lookup only for
 * those three protocols). With source_verify 0
 * (enable-source-ip-verification: false) the IPv4 and ARP checks are
 * pruned at load; the non-IPv4 drop stays.
 */
#ifndef MYELIN_LIB_SOURCE_H
#define MYELIN_LIB_SOURCE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "endpoint.h"
#include "eth.h"
#include "fib.h"
#include "ipv4.h"
#include "maps.h"
#include "reasons.h"

#define ARP_HRD_ETHER 1

/* arp_eth_ipv4 is an Ethernet/IPv4 ARP packet (RFC 826) as on the wire. */
struct arp_eth_ipv4 {
	__be16 hrd;
	__be16 pro;
	__u8 hln;
	__u8 pln;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
};

/* mac_equal compares two MACs (any alignment). */
static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
	__u32 a4, b4;
	__u16 a2, b2;

	__builtin_memcpy(&a4, a, 4);
	__builtin_memcpy(&b4, b, 4);
	__builtin_memcpy(&a2, a + 4, 2);
	__builtin_memcpy(&b2, b + 4, 2);
	return a4 == b4 && a2 == b2;
}

/*
 * source_owner returns the endpoint owning the veth the packet came in on
 * if addr (network order) and mac are its own, else NULL.
 * skb->ingress_ifindex is that veth (the host side, which
 * endpoint_info.ifindex names too).
 */
static __always_inline const struct endpoint_info *source_owner(struct __sk_buff *skb, __u32 addr,
								const __u8 *mac)
{
	const struct endpoint_info *ep = endpoint_lookup(addr);

	if (ep && ep->ifindex == skb->ingress_ifindex && mac_equal(mac, ep->pod_mac))
		return ep;
	return NULL;
}

/*
 * source_check_ipv4 returns 0 when a parsed IPv4 packet comes from its
 * endpoint's own address and MAC, else DROP_SPOOFED_SOURCE: a forged pod,
 * node, service or outside address, or a forged MAC. *ep gets the endpoint
 * (left alone when the check is off).
 */
static __always_inline int source_check_ipv4(struct __sk_buff *skb, const struct ipv4_info *info,
					     const struct endpoint_info **ep)
{
	const struct ethhdr *eth;

	if (!source_verify)
		return 0;
	/* ipv4_parse left the Ethernet and IPv4 headers linear. */
	eth = eth_header(skb);
	if (!eth)
		return DROP_INVALID_PACKET;
	*ep = source_owner(skb, info->saddr, eth->h_source);
	if (!*ep)
		return DROP_SPOOFED_SOURCE;
	return 0;
}

/*
 * source_check_to_pod: what the stack delivers into a pod (myelin_to_pod)
 * from this node's PodCIDR, where the agent set it (local_pod_cidr_addr,
 * config.h), must have come in on the veth of the pod owning that address: a
 * pod of this node reaches another through its own veth, so one that another
 * device brought in (a second uplink, a foreign tunnel device) was forged by
 * a host there, as one on the uplink is (myelin_from_netdev). What the node's
 * stack built (ingress_ifindex 0) is lib/host_source.h's to check; the node's
 * health address, a scope-host address on lo, is never forwarded (the stack
 * drops it as a martian), so it needs no exception. DROP_SPOOFED_SOURCE.
 * Where source validation is on, myelin_from_pod made the same lookup and
 * compare for the packet as it left its pod (source_owner); this one catches
 * what came in another way. Cost, with the check on: one
 * myelin_endpoints lookup per packet from this node's PodCIDR that the stack
 * forwards into a pod (legacy host routing between two pods of the node),
 * none for other sources; pruned at load when off.
 */
static __always_inline int source_check_to_pod(struct __sk_buff *skb, const struct ipv4_info *info)
{
	const struct endpoint_info *ep;
	__u32 in = skb->ingress_ifindex;

	if (!in || !local_pod_contains(info->saddr))
		return 0;
	ep = endpoint_lookup(info->saddr);
	if (ep && ep->ifindex == in)
		return 0;
	return DROP_SPOOFED_SOURCE;
}

/*
 * tunnel_dst_local tells whether this node would take a packet to info->daddr
 * for itself: the FIB answers NOT_FWDED for a local, broadcast or multicast
 * destination (any address of the node: a second uplink's, a loopback's, not
 * only node_ip), and FWD_DISABLED when the pod's veth does not forward, where
 * delivering locally is all the stack could do with it. A function of its
 * own (not inlined): its lookup's stack is not added to myelin_from_pod's
 * deepest call chain.
 */
static __noinline int tunnel_dst_local(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct bpf_fib_lookup fib;
	long rc = fib_lookup_ingress(skb, info, &fib);

	return rc == BPF_FIB_LKUP_RET_NOT_FWDED || rc == BPF_FIB_LKUP_RET_FWD_DISABLED;
}

/*
 * source_check_tunnel returns DROP_POD_TUNNEL for an IPIP, IPv6-in-IPv4 or
 * GRE packet (its outer source already checked) to an address inside the
 * cluster: a pod (cluster_contains), this node (node_ip, or any address the
 * FIB says is this node's: tunnel_dst_local), or another destination of
 * myelin_nomasq (every node's IP, ipv4-native-routing-cidr,
 * non-masquerade-cidrs; the agent writes it whatever the masquerade mode).
 * Its inner packet may carry any source, and a node's decapsulating device
 * myelin did not make would deliver it as if from there. Tunnels to other
 * destinations (a pod running a VPN) pass. TCP and UDP pay one test of the
 * protocol number; only these three protocols pay the lookups.
 */
static __always_inline int source_check_tunnel(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct nomasq_key key = {.prefixlen = 32, .addr = info->daddr};

	if (!source_verify)
		return 0;
	if (info->proto != IPPROTO_IPIP && info->proto != IPPROTO_IPV6 &&
	    info->proto != IPPROTO_GRE)
		return 0;
	if (cluster_contains(info->daddr) || info->daddr == node_ip ||
	    bpf_map_lookup_elem(&myelin_nomasq, &key) || tunnel_dst_local(skb, info))
		return DROP_POD_TUNNEL;
	return 0;
}

/*
 * source_check_arp returns 0 for an Ethernet/IPv4 ARP packet whose sender
 * address and sender MAC (and Ethernet source) are the endpoint's own, else
 * a drop reason. info gets the sender and target addresses for the event.
 * Pods have a permanent neighbour entry for their gateway, so ARP is rare:
 * it may afford bpf_skb_load_bytes.
 */
static __always_inline int source_check_arp(struct __sk_buff *skb, struct ipv4_info *info)
{
	struct arp_eth_ipv4 arp;
	__u8 src[ETH_ALEN];

	if (!source_verify)
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &arp, sizeof(arp)) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_ALEN, src, sizeof(src)) < 0)
		return DROP_INVALID_PACKET;
	if (arp.hrd != bpf_htons(ARP_HRD_ETHER) || arp.pro != bpf_htons(ETH_P_IP) ||
	    arp.hln != ETH_ALEN || arp.pln != 4)
		return DROP_UNSUPPORTED_L3;
	__builtin_memcpy(&info->saddr, arp.spa, 4);
	__builtin_memcpy(&info->daddr, arp.tpa, 4);
	if (!mac_equal(src, arp.sha) || !source_owner(skb, info->saddr, arp.sha))
		return DROP_SPOOFED_SOURCE;
	return 0;
}

/*
 * source_check_l2 returns DROP_UNSUPPORTED_L3 for an 802.1Q/802.1ad-tagged
 * frame: the kernel moves a tag into skb metadata before TCX runs, so the
 * packet would otherwise look like untagged IPv4 or ARP. Always on.
 */
static __always_inline int source_check_l2(struct __sk_buff *skb)
{
	return skb->vlan_present ? DROP_UNSUPPORTED_L3 : 0;
}

/*
 * source_check_other returns 0 for what a pod may send besides IPv4 (valid
 * ARP), else the drop reason: DROP_UNSUPPORTED_L3 for IPv6 (router
 * advertisements, redirects, anything) and every other ethertype.
 */
static __always_inline int source_check_other(struct __sk_buff *skb, struct ipv4_info *info)
{
	if (skb->protocol != bpf_htons(ETH_P_ARP))
		return DROP_UNSUPPORTED_L3;
	return source_check_arp(skb, info);
}

#endif /* MYELIN_LIB_SOURCE_H */
