/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Tunnel mode: pods of other nodes are reached over VXLAN (outer IPv4 + UDP
 * + VXLAN). The programs encapsulate (tunnel_encap) and decapsulate
 * (tunnel_decap_deliver) themselves where they can; everything else goes
 * through the collect-metadata device myelin_vxlan, with the remote node in
 * the skb's tunnel metadata.
 */
#ifndef MYELIN_LIB_TUNNEL_H
#define MYELIN_LIB_TUNNEL_H

#include <linux/bpf.h>
#include <linux/if_packet.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "ct.h"
#include "endpoint.h"
#include "eth.h"
#include "ipv4.h"
#include "l4.h"
#include "maps.h"
#include "verdict.h"

#define TUNNEL_TTL 64 /* outer IPv4 TTL */
#define TUNNEL_VNI 0  /* one overlay: every node sends and accepts VNI 0 */
/* The outer UDP source port spreads flows over the kernel's default local
 * port range, as myelin_vxlan picks it (udp_flow_src_port). */
#define TUNNEL_SPORT_MIN 32768
#define TUNNEL_SPORT_MAX 60999

#define VXLAN_FLAGS_VNI bpf_htonl(0x08000000)
/* Outer IPv4, UDP, VXLAN and the inner Ethernet header: 50 bytes. */
#define VXLAN_OUTER_LEN	       (sizeof(struct iphdr) + sizeof(struct udphdr) + 8 + ETH_HLEN)
#define IPV4_ECN_MASK	       0x03
#define IPV4_ECN_ECT0	       0x02
#define IPV4_ECN_CE	       0x03
#define TUNNEL_ENCAP_UNCHANGED (-1)

/* The headers tunnel_encap puts between the Ethernet header and the packet. */
struct vxlan_outer {
	struct iphdr ip;
	struct udphdr udp;
	__be32 vx_flags; /* only the I flag (VNI valid) is set */
	__be32 vx_vni;	 /* VNI << 8 */
	struct ethhdr eth;
} __attribute__((packed));

/*
 * overlay_mac_of writes the myelin_vxlan MAC of the node at node_ip (network
 * order): 02:6d followed by the IPv4 octets. Mirrors datapath.OverlayMAC.
 */
static __always_inline void overlay_mac_of(__u32 node_ip, __u8 *mac)
{
	mac[0] = 0x02;
	mac[1] = 0x6d;
	__builtin_memcpy(&mac[2], &node_ip, 4);
}

/* tunnel_lookup returns the node behind the PodCIDR holding addr (network order), or NULL. */
static __always_inline const struct tunnel_endpoint *tunnel_lookup(__u32 addr)
{
	struct tunnel_lpm_key key = {.prefixlen = 32, .addr = addr};

	return bpf_map_lookup_elem(&myelin_tunnel, &key);
}

/*
 * tunnel_node_lookup returns the tunnel to the node whose IP is addr (network
 * order), or NULL: with tunnel-pod-to-node other than plain, a pod's packets
 * to another node's IP take the overlay as those to its pods do, so the
 * receiver knows their pod source from the tunnel peer rule (a plain one on
 * its uplink is then forged; docs/datapath.md, "Pods to other nodes").
 * Only called when the key is on: one hash lookup per packet from a pod to
 * an address outside every PodCIDR.
 */
static __always_inline const struct tunnel_endpoint *tunnel_node_lookup(__u32 addr)
{
	return bpf_map_lookup_elem(&myelin_tunnel_nodes, &addr);
}

/*
 * tunnel_check_to_pod: with tunnel-pod-to-node enforce, a pod of another
 * node (its address in a PodCIDR of myelin_tunnel) reaches this node only
 * through the overlay: its pod traffic and its traffic to this node's IP are
 * encapsulated, and what the uplink brings plain from it is dropped
 * (myelin_from_netdev). So a packet from such an address that the stack
 * delivers into a pod (myelin_to_pod) must have come in on myelin_vxlan; one
 * another device brought (a second network's host, a foreign decapsulating
 * device such as tunl0) was forged there: DROP_SPOOFED_SOURCE. What the
 * node's own stack built (ingress_ifindex 0) is lib/host_source.h's.
 * Pruned at load unless enforce; then one myelin_tunnel lookup per packet
 * from a cluster address that the stack delivers into a pod.
 */
static __always_inline int tunnel_check_to_pod(struct __sk_buff *skb, const struct ipv4_info *info)
{
	__u32 in = skb->ingress_ifindex;

	if (tunnel_pod_to_node != TUNNEL_POD_TO_NODE_ENFORCE || !in || in == overlay_ifindex ||
	    !cluster_cidr_mask || !cluster_contains(info->saddr))
		return 0;
	return tunnel_lookup(info->saddr) ? DROP_SPOOFED_SOURCE : 0;
}

/*
 * tunnel_peer_ok says whether a tunnelled packet from inner_src may come from
 * the underlay address outer_src: the node whose PodCIDR holds the inner
 * source (myelin_tunnel), or, for an address that is no pod's, the inner
 * source itself (a node's own traffic, e.g. NodePort SNATed to its IP). So a
 * stranger who reaches the tunnel port can't inject packets from pods (or
 * anyone else): at most from its own address, which it could send natively
 * anyway. A pod is no such stranger: its own packets are judged by its egress
 * policy where they leave it, and VXLAN it sends from its own address to a
 * node's tunnel port would carry inner packets past that check; so a pod's
 * address (in a PodCIDR of myelin_tunnel, a pod of this node, or in the
 * cluster CIDR when the programs have it) is never its own tunnel peer. Cost:
 * one myelin_tunnel lookup; for a node's own traffic one myelin_endpoints
 * lookup more.
 */
static __always_inline int tunnel_peer_ok(__u32 inner_src, __u32 outer_src)
{
	const struct tunnel_endpoint *te = tunnel_lookup(inner_src);

	if (te)
		return te->node_ip == outer_src;
	if (inner_src != outer_src || (cluster_cidr_mask && cluster_contains(inner_src)))
		return 0;
	return endpoint_lookup(inner_src) == NULL;
}

/*
 * tunnel_peer_check returns 0 when a packet myelin_vxlan decapsulated passes
 * the peer rule (tunnel_peer_ok) with the outer source the device recorded in
 * the tunnel metadata, else DROP_UNKNOWN_TUNNEL_PEER; a packet without tunnel
 * metadata is dropped too, and so is one whose outer destination was not this
 * node's address: peers send there (myelin_tunnel holds the nodes' addresses),
 * while the device's socket takes the tunnel port on every address of the
 * node. VXLAN a pod sends to another address of a node (a VIP, a second
 * network) leaves the pod's node masqueraded to that node's address, and
 * would pass the peer rule with any inner source of that node: another of its
 * pods, or the node itself. Cost: one helper call more.
 */
static __always_inline int tunnel_peer_check(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct bpf_tunnel_key key = {};

	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0) < 0)
		return DROP_UNKNOWN_TUNNEL_PEER;
	/* The helper gives host order. */
	if (bpf_htonl(key.local_ipv4) != node_ip)
		return DROP_UNKNOWN_TUNNEL_PEER;
	return tunnel_peer_ok(info->saddr, bpf_htonl(key.remote_ipv4)) ? 0
								       : DROP_UNKNOWN_TUNNEL_PEER;
}

/*
 * tunnel_outer_route asks the FIB for the underlay route to the node at
 * remote from this node's address, as myelin_vxlan would for the outer
 * packet, and whether the packet fits it once encapsulated (a GSO packet is
 * checked by segment later). Returns 0 with fib filled (egress device and
 * next hop), or -1: no such route here (test-run), or the outer packet needs
 * fragmenting, which the device does.
 */
static __always_inline int tunnel_outer_route(struct __sk_buff *skb, __u32 remote,
					      struct bpf_fib_lookup *fib)
{
	fib->family = AF_INET;
	fib->ipv4_src = node_ip;
	fib->ipv4_dst = remote;
	fib->ifindex = skb->ingress_ifindex;
	fib->tot_len = skb->gso_size ? 0 : skb->len - ETH_HLEN + VXLAN_OUTER_LEN;
	if (skb->len - ETH_HLEN + VXLAN_OUTER_LEN > 0xffff) /* BIG TCP: the device's */
		return -1;
	if (bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH) !=
	    BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	return 0;
}

/*
 * tunnel_encap puts the outer IPv4, UDP and VXLAN headers and an inner
 * Ethernet header from src to dst between the packet's Ethernet header (the
 * outer one now, whose MACs bpf_redirect_neigh writes) and its IPv4 packet: what myelin_vxlan
 * builds from a tunnel key (outer TTL 64, ECN from the inner packet, no UDP checksum, VNI 0, the
 * source port from the flow hash). bpf_skb_adjust_room marks the skb as UDP
 * tunnel encapsulation, so a GSO packet is segmented (by software or the NIC)
 * like one from the device, with its MSS kept. Returns 0;
 * TUNNEL_ENCAP_UNCHANGED when the helper refused (the packet is as it was:
 * e.g. an skb already marked as encapsulated); another negative value when
 * the headers could not be written.
 */
static __always_inline int tunnel_encap(struct __sk_buff *skb, const struct ipv4_info *info,
					__u32 remote, const __u8 *src, const __u8 *dst)
{
	const __u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
			    BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
			    BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN);
	__u8 ecn = info->tos & IPV4_ECN_MASK;
	struct vxlan_outer h = {};
	struct iphdr ip = {};
	__u32 len, hash;

	if (bpf_skb_adjust_room(skb, VXLAN_OUTER_LEN, BPF_ADJ_ROOM_MAC, flags) < 0)
		return TUNNEL_ENCAP_UNCHANGED;
	len = skb->len - ETH_HLEN;
	hash = bpf_get_hash_recalc(skb);
	hash ^= hash << 16;

	ip.version = 4;
	ip.ihl = sizeof(ip) / 4;
	ip.tos = ecn == IPV4_ECN_CE ? IPV4_ECN_ECT0 : ecn; /* RFC 6040 */
	ip.tot_len = bpf_htons(len);
	ip.id = bpf_get_prandom_u32(); /* DF clear, as the device sends */
	ip.ttl = TUNNEL_TTL;
	ip.protocol = IPPROTO_UDP;
	ip.saddr = node_ip;
	ip.daddr = remote;
	ip.check = ipv4_header_csum(&ip);
	h.ip = ip;
	h.udp.source = bpf_htons((((__u64)hash * (TUNNEL_SPORT_MAX - TUNNEL_SPORT_MIN)) >> 32) +
				 TUNNEL_SPORT_MIN);
	h.udp.dest = tunnel_port;
	h.udp.len = bpf_htons(len - sizeof(struct iphdr));
	h.vx_flags = VXLAN_FLAGS_VNI;
	h.vx_vni = bpf_htonl(TUNNEL_VNI << 8);
	__builtin_memcpy(h.eth.h_source, src, ETH_ALEN);
	__builtin_memcpy(h.eth.h_dest, dst, ETH_ALEN);
	h.eth.h_proto = bpf_htons(ETH_P_IP);
	return bpf_skb_store_bytes(skb, ETH_HLEN, &h, sizeof(h), 0) < 0 ? -2 : 0;
}

/*
 * tunnel_encap_redirect routes the packet as one hop (TTL decrement) into the
 * overlay. The inner Ethernet header goes from this node's overlay MAC to the
 * receiving node's, as the kernel's encap routes address it, so a legacy
 * receiver's stack takes the frame as its own (a BPF receiver rewrites it on
 * delivery anyway; VXLAN drops frames from its own MAC as loops). An
 * expiring TTL goes to the stack, which answers with ICMP time exceeded.
 *
 * With the tunnel port configured and an underlay route the packet fits, it
 * encapsulates here (tunnel_encap) and sends the outer packet to the FIB's
 * next hop with bpf_redirect_neigh, skipping myelin_vxlan: its transmit,
 * its route lookup per packet (a tunnel key from BPF carries no route cache),
 * the outer packet's IP output and netfilter hooks. Otherwise it sets the
 * tunnel metadata (remote node, outer TTL, VNI 0, no outer UDP checksum) and
 * redirects to myelin_vxlan's egress, which builds the same outer headers.
 * The packet is counted (and its flow recorded) before it is encapsulated,
 * as the inner packet it is.
 */
static __always_inline int tunnel_encap_redirect(struct __sk_buff *skb,
						 const struct ipv4_info *info, __u8 dir,
						 const struct tunnel_endpoint *te)
{
	struct bpf_tunnel_key key = {
		.tunnel_id = TUNNEL_VNI,
		.remote_ipv4 = bpf_ntohl(te->node_ip), /* the helper wants host order */
		.tunnel_ttl = TUNNEL_TTL,
	};
	struct bpf_fib_lookup fib = {};
	int here, ret;

	if (ipv4_ttl_expired(info))
		return verdict_pass(skb, info, dir);
	here = tunnel_port && tunnel_outer_route(skb, te->node_ip, &fib) == 0;
	/* Before the TTL rewrite, so a refused key leaves the packet as it came. */
	if (!here && bpf_skb_set_tunnel_key(skb, &key, sizeof(key), BPF_F_ZERO_CSUM_TX) < 0)
		return verdict_drop(skb, info, dir, DROP_TUNNEL_KEY);
	__u8 src[ETH_ALEN], dst[ETH_ALEN];

	/* Byte by byte: volatile reads, or clang folds in the all-zero initializer. */
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		src[i] = overlay_mac[i];
	overlay_mac_of(te->node_ip, dst);
	if (ipv4_route_hop(skb, src, dst) < 0)
		return verdict_drop(skb, info, dir, DROP_INVALID_PACKET);
	if (!here)
		return verdict_redirect(skb, info, dir, bpf_redirect(overlay_ifindex, 0));

	verdict_trace(skb, info, dir, REASON_FORWARDED);
	ret = tunnel_encap(skb, info, te->node_ip, src, dst);
	if (ret == 0) {
		struct bpf_redir_neigh nh = {
			.nh_family = AF_INET, .ipv4_nh = fib.ipv4_dst, /* the gateway, if any */
		};

		return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	}
	/* Counted already: whatever happens now is not counted again. */
	if (ret != TUNNEL_ENCAP_UNCHANGED ||
	    bpf_skb_set_tunnel_key(skb, &key, sizeof(key), BPF_F_ZERO_CSUM_TX) < 0)
		return TC_ACT_SHOT;
	return bpf_redirect(overlay_ifindex, 0);
}

/*
 * What follows the outer IPv4 header of a VXLAN packet (RFC 7348), read at
 * once: UDP, the VXLAN header, the inner Ethernet and IPv4 headers. Aligned
 * to 4, so a copy moves words, not bytes: the verifier's strict alignment
 * (NET_IP_ALIGN 2) finds the UDP header at offset 36; where NET_IP_ALIGN is
 * 0 (x86) the words are unaligned, which x86 and arm64 load at no cost.
 * VXLAN_FRAME_LEN leaves out the padding the alignment adds.
 */
struct vxlan_frame {
	struct udphdr udp;
	__be32 vx_flags; /* only the I flag (VNI valid) is set */
	__be32 vx_vni;	 /* VNI << 8 */
	struct ethhdr eth;
	struct iphdr ip;
} __attribute__((packed, aligned(4)));

#define VXLAN_FRAME_LEN (offsetof(struct vxlan_frame, ip) + sizeof(struct iphdr))

#define TUNNEL_DECAP_NONE (-1)

/*
 * tunnel_decap_deliver delivers a VXLAN packet that arrived on the uplink for
 * a pod of this node straight into the pod: it checks what myelin_vxlan and
 * myelin_from_overlay would (outer destination this node, port tunnel_port,
 * VNI 0, an IPv4 inner frame, the peer rule on the outer source), strips the outer headers with
 * bpf_skb_adjust_room and delivers the inner packet as myelin_from_overlay does (counted there,
 * DIR_FROM_OVERLAY). The packet skips the outer IP receive, the UDP socket lookup, the VXLAN
 * device's receive, its metadata allocation and its GRO cell (a second
 * softirq queue), and myelin_from_overlay's run: about a third of what the
 * tunnel adds to a small packet (docs/datapath.md, "Tunnel mode").
 *
 * Everything else returns TUNNEL_DECAP_NONE untouched and takes the kernel's
 * path as before: GSO packets (this kernel's bpf_skb_adjust_room would leave
 * their UDP tunnel GSO type and encapsulation flag behind; the device clears
 * them), an outer UDP checksum (nodes send none; the device verifies one), an
 * outer ECN CE mark (RFC 6040 decapsulation is the device's), IP options or
 * fragments, frames not addressed to this host, other ports, flags or VNIs,
 * non-IPv4 inner frames, inner packets for anything but a local pod, and
 * every packet the peer rule refuses (myelin_from_overlay drops and counts
 * those as DROP_UNKNOWN_TUNNEL_PEER, as before). The outer IPv4 header
 * checksum is not verified: its addresses are all that is used, and anyone
 * who can forge them can also send a valid checksum.
 */
static __always_inline int tunnel_decap_deliver(struct __sk_buff *skb,
						const struct ipv4_info *outer)
{
	const struct endpoint_info *ep;
	const struct vxlan_frame *p;
	struct ipv4_info info = {};
	struct vxlan_frame f;

	if (!tunnel_port || skb->gso_size || skb->pkt_type != PACKET_HOST || outer->frag ||
	    outer->l4_off != ETH_HLEN + sizeof(struct iphdr) ||
	    (outer->tos & IPV4_ECN_MASK) == IPV4_ECN_CE)
		return TUNNEL_DECAP_NONE;
	/* From the linear data when it is all there (no helper call). */
	p = l4_linear(skb, outer->l4_off, VXLAN_FRAME_LEN);
	if (p)
		__builtin_memcpy(&f, p, VXLAN_FRAME_LEN);
	else if (bpf_skb_load_bytes(skb, outer->l4_off, &f, VXLAN_FRAME_LEN) < 0)
		return TUNNEL_DECAP_NONE;
	if (f.udp.dest != tunnel_port || f.udp.check ||
	    skb->len != outer->l4_off + bpf_ntohs(f.udp.len) || f.vx_flags != VXLAN_FLAGS_VNI ||
	    f.vx_vni != bpf_htonl(TUNNEL_VNI << 8) || f.eth.h_proto != bpf_htons(ETH_P_IP))
		return TUNNEL_DECAP_NONE;
	/* myelin_from_overlay's checks, with the outer source at hand. */
	if (f.ip.saddr == node_ip || f.ip.saddr == LB_HAIRPIN_ADDR ||
	    !tunnel_peer_ok(f.ip.saddr, outer->saddr))
		return TUNNEL_DECAP_NONE;
	ep = endpoint_lookup(f.ip.daddr);
	if (!ep)
		return TUNNEL_DECAP_NONE;
	/* Leaves the outer Ethernet header (type IPv4) in front of the inner IPv4
	 * one; a checksum the NIC marked verified (CHECKSUM_UNNECESSARY) is reset,
	 * so the pod's stack verifies the inner checksums itself. */
	if (bpf_skb_adjust_room(skb, -(__s32)VXLAN_OUTER_LEN, BPF_ADJ_ROOM_MAC, 0) < 0)
		return TUNNEL_DECAP_NONE;
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_INVALID_PACKET);
	return endpoint_deliver(skb, &info, DIR_FROM_OVERLAY, ep);
}

#endif /* MYELIN_LIB_TUNNEL_H */
