/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Tunnel mode: pods of other nodes are reached by handing the packet to the
 * collect-metadata VXLAN device myelin_vxlan with the remote node in the
 * skb's tunnel metadata; the device encapsulates (outer IPv4 + UDP + VXLAN).
 */
#ifndef MYELIN_LIB_TUNNEL_H
#define MYELIN_LIB_TUNNEL_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "config.h"
#include "ipv4.h"
#include "maps.h"
#include "verdict.h"

#define TUNNEL_TTL 64 /* outer IPv4 TTL */
#define TUNNEL_VNI 0  /* one overlay: every node sends and accepts VNI 0 */

/* tunnel_lookup returns the node behind the PodCIDR holding addr (network order), or NULL. */
static __always_inline const struct tunnel_endpoint *tunnel_lookup(__u32 addr)
{
	struct tunnel_lpm_key key = {.prefixlen = 32, .addr = addr};

	return bpf_map_lookup_elem(&myelin_tunnel, &key);
}

/*
 * tunnel_encap_redirect routes the packet as one hop (TTL decrement) into the
 * overlay: it sets the tunnel metadata (remote node, outer TTL, VNI 0, no
 * outer UDP checksum) and redirects to myelin_vxlan's egress, which builds
 * the outer headers. The inner Ethernet header is sent as the pod wrote it;
 * the receiving node's myelin_from_overlay rewrites it on delivery. An
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
	if (ipv4_dec_ttl(skb) < 0)
		return verdict_drop(skb, info, dir, DROP_INVALID_PACKET);
	return verdict_redirect(skb, info, dir, bpf_redirect(overlay_ifindex, 0));
}

#endif /* MYELIN_LIB_TUNNEL_H */
