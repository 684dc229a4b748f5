/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Tunnel mode: pods of other nodes are reached by handing the packet to the
 * collect-metadata VXLAN device myelin_vxlan with the remote node in the
 * skb's tunnel metadata; the device encapsulates (outer IPv4 + UDP + VXLAN).
 */
#ifndef MYELIN_LIB_TUNNEL_H
#define MYELIN_LIB_TUNNEL_H

#include <linux/bpf.h>
#include <linux/if_packet.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "endpoint.h"
#include "eth.h"
#include "ipv4.h"
#include "maps.h"
#include "verdict.h"

#define TUNNEL_TTL 64 /* outer IPv4 TTL */
#define TUNNEL_VNI 0  /* one overlay: every node sends and accepts VNI 0 */

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
 * tunnel_peer_check returns 0 when a decapsulated IPv4 packet came from the
 * node that owns its inner source, else DROP_UNKNOWN_TUNNEL_PEER: the outer
 * source (the tunnel metadata myelin_vxlan recorded) must be the node whose
 * PodCIDR holds the inner source (myelin_tunnel), or the inner source itself
 * (a node's own traffic, e.g. NodePort SNATed to its IP). So a stranger who
 * reaches the tunnel port can't inject packets from pods (or anyone else):
 * at most from its own address, which it could send natively anyway. A
 * packet without tunnel metadata is dropped too. Cost: one helper call and,
 * for pod sources, one myelin_tunnel lookup per decapsulated packet.
 */
static __always_inline int tunnel_peer_check(struct __sk_buff *skb, const struct ipv4_info *info)
{
	struct bpf_tunnel_key key = {};
	const struct tunnel_endpoint *te;
	__u32 outer;

	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0) < 0)
		return DROP_UNKNOWN_TUNNEL_PEER;
	outer = bpf_htonl(key.remote_ipv4); /* the helper gives host order */
	if (info->saddr == outer)
		return 0;
	te = tunnel_lookup(info->saddr);
	if (te && te->node_ip == outer)
		return 0;
	return DROP_UNKNOWN_TUNNEL_PEER;
}

/*
 * tunnel_encap_redirect routes the packet as one hop (TTL decrement) into the
 * overlay: it sets the tunnel metadata (remote node, outer TTL, VNI 0, no
 * outer UDP checksum) and redirects to myelin_vxlan's egress, which builds
 * the outer headers. The inner Ethernet header goes from this node's overlay
 * MAC to the receiving node's, as the kernel's encap routes address it, so a
 * legacy receiver's stack takes the frame as its own (a BPF receiver rewrites
 * it on delivery anyway; VXLAN drops frames from its own MAC as loops). An
 * expiring TTL goes to the stack, which answers with ICMP time exceeded.
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

	if (ipv4_ttl_expired(info))
		return verdict_pass(skb, info, dir);
	/* Before the TTL rewrite, so a refused key leaves the packet as it came. */
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), BPF_F_ZERO_CSUM_TX) < 0)
		return verdict_drop(skb, info, dir, DROP_TUNNEL_KEY);
	__u8 src[ETH_ALEN], dst[ETH_ALEN];

	/* Byte by byte: volatile reads, or clang folds in the all-zero initializer. */
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		src[i] = overlay_mac[i];
	overlay_mac_of(te->node_ip, dst);
	/* Both helpers below re-derive their packet pointers from skb. */
	if (eth_set_macs(skb, src, dst) < 0 || ipv4_dec_ttl(skb) < 0)
		return verdict_drop(skb, info, dir, DROP_INVALID_PACKET);
	return verdict_redirect(skb, info, dir, bpf_redirect(overlay_ifindex, 0));
}

/*
 * What follows the outer IPv4 header of a VXLAN packet (RFC 7348), read at
 * once: UDP, the VXLAN header, the inner Ethernet and IPv4 headers.
 */
struct vxlan_frame {
	struct udphdr udp;
	__be32 vx_flags; /* only the I flag (VNI valid) is set */
	__be32 vx_vni;	 /* VNI << 8 */
	struct ethhdr eth;
	struct iphdr ip;
} __attribute__((packed));

#define VXLAN_FLAGS_VNI	  bpf_htonl(0x08000000)
#define VXLAN_OUTER_LEN	  (sizeof(struct iphdr) + sizeof(struct udphdr) + 8 + ETH_HLEN)
#define IPV4_ECN_MASK	  0x03
#define IPV4_ECN_CE	  0x03
#define TUNNEL_DECAP_NONE (-1)

/*
 * tunnel_decap_deliver delivers a VXLAN packet that arrived on the uplink for
 * a pod of this node straight into the pod: it checks what myelin_vxlan and
 * myelin_from_overlay would (outer destination this node, port tunnel_port,
 * VNI 0, an IPv4 inner frame, the peer rule of tunnel_peer_check on the outer
 * source), strips the outer headers with bpf_skb_adjust_room and delivers the
 * inner packet as myelin_from_overlay does (counted there, DIR_FROM_OVERLAY).
 * The packet skips the outer IP receive, the UDP socket lookup, the VXLAN
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
	const struct tunnel_endpoint *te;
	struct ipv4_info info = {};
	struct vxlan_frame f;

	if (!tunnel_port || skb->gso_size || skb->pkt_type != PACKET_HOST || outer->frag ||
	    outer->l4_off != ETH_HLEN + sizeof(struct iphdr) ||
	    (outer->tos & IPV4_ECN_MASK) == IPV4_ECN_CE)
		return TUNNEL_DECAP_NONE;
	if (bpf_skb_load_bytes(skb, outer->l4_off, &f, sizeof(f)) < 0)
		return TUNNEL_DECAP_NONE;
	if (f.udp.dest != tunnel_port || f.udp.check ||
	    skb->len != outer->l4_off + bpf_ntohs(f.udp.len) || f.vx_flags != VXLAN_FLAGS_VNI ||
	    f.vx_vni != bpf_htonl(TUNNEL_VNI << 8) || f.eth.h_proto != bpf_htons(ETH_P_IP))
		return TUNNEL_DECAP_NONE;
	/* The peer rule (tunnel_peer_check), with the outer source at hand. */
	if (f.ip.saddr == node_ip)
		return TUNNEL_DECAP_NONE;
	if (f.ip.saddr != outer->saddr) {
		te = tunnel_lookup(f.ip.saddr);
		if (!te || te->node_ip != outer->saddr)
			return TUNNEL_DECAP_NONE;
	}
	ep = endpoint_lookup(f.ip.daddr);
	if (!ep)
		return TUNNEL_DECAP_NONE;
	/* Leaves the outer Ethernet header (type IPv4) in front of the inner IPv4
	 * one; a checksum the device marked verified is reset, so the pod's stack
	 * checks the inner one itself, as it would after the device. */
	if (bpf_skb_adjust_room(skb, -(__s32)VXLAN_OUTER_LEN, BPF_ADJ_ROOM_MAC, 0) < 0)
		return TUNNEL_DECAP_NONE;
	if (ipv4_parse(skb, &info) < 0)
		return verdict_drop(skb, &info, DIR_FROM_OVERLAY, DROP_INVALID_PACKET);
	return endpoint_deliver(skb, &info, DIR_FROM_OVERLAY, ep);
}

#endif /* MYELIN_LIB_TUNNEL_H */
