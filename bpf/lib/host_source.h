/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the node itself sends may not pass as a pod's. Source validation
 * (lib/source.h) checks what pods send; this checks what the node's own
 * stack builds: its processes and hostNetwork pods, which a tenant may run
 * too. It runs where such packets leave: myelin_to_netdev (the uplink, to
 * other nodes), myelin_to_overlay (what myelin_vxlan encapsulates) and
 * myelin_to_pod (into a pod of this node).
 *
 * - A packet the stack built (skb->ingress_ifindex 0: received on no
 *   device, so no pod sent it) from a pod address (the cluster CIDR): a raw
 *   socket (CAP_NET_RAW, in containerd's default set) writes any source, and
 *   the receiving pod, its node's NetworkPolicy and the peer rule of a tunnel
 *   would all take it for that pod's.
 * - In tunnel mode, UDP to the tunnel port that the stack built and
 *   myelin_vxlan did not encapsulate: a plain UDP socket (no capability at
 *   all) could send another node a VXLAN frame whose inner source is a pod of
 *   this node, which that node's peer rule accepts (the outer source is
 *   right). myelin_to_overlay sets HOST_SOURCE_OVERLAY in skb->mark on what
 *   the device is about to encapsulate, after checking its inner packet like
 *   the rest; the kernel keeps the mark through the encapsulation (which
 *   clears ingress_ifindex, and tc_index too on this kernel), and
 *   myelin_to_netdev clears the bit again. A process could set it only with
 *   CAP_NET_ADMIN (SO_MARK), which rewrites tc programs anyway. VXLAN that BPF
 *   builds (tunnel_encap) keeps the ingress_ifindex of the pod or the uplink it
 *   came from, so it is not the stack's.
 *
 * The node's health address (node_health_ip, in its PodCIDR) is the node's
 * own: its probes and answers leave from it; so is its IP (node_ip), which may
 * lie in the cluster CIDR outside every PodCIDR (routing.Peers allows it).
 *
 * Both are DROP_SPOOFED_SOURCE in the direction of the program. Not covered:
 * a packet socket with PACKET_QDISC_BYPASS (CAP_NET_RAW again) hands frames
 * to the driver past every tc program; drop NET_RAW from hostNetwork pods.
 *
 * Cost: what myelin forwards pays a load and a test (ingress_ifindex); what
 * the stack builds a parse (the caller's) and two compares, UDP a port read.
 * Off with the pods' checks when source_verify is 0.
 */
#ifndef MYELIN_LIB_HOST_SOURCE_H
#define MYELIN_LIB_HOST_SOURCE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "config.h"
#include "ct.h"
#include "ipv4.h"
#include "l4.h"
#include "reasons.h"

/*
 * HOST_SOURCE_OVERLAY: the skb->mark bit that says "myelin_to_overlay passed
 * this" between myelin_vxlan's egress and the uplink's. Outside kube-proxy's
 * (0x4000, 0x8000) and Cilium's (0x0f00) bits; the outer route lookup sees it
 * (an ip rule on fwmark would have to leave it out of its mask).
 */
#define HOST_SOURCE_OVERLAY 0x00200000

/* host_source_on says whether the node's own packets are checked at all. */
static __always_inline int host_source_on(void)
{
	return source_verify && cluster_cidr_mask;
}

/* host_built says whether the node's stack built the packet (no device received it). */
static __always_inline int host_built(const struct __sk_buff *skb)
{
	return host_source_on() && skb->ingress_ifindex == 0;
}

/*
 * host_source_check checks a packet the stack built (host_built; anything
 * else passes) for a pod source and, when tunnel is set, for UDP to the
 * tunnel port myelin_vxlan did not encapsulate (clearing the device's mark).
 * Returns 0 or DROP_SPOOFED_SOURCE.
 */
static __always_inline int host_source_check(struct __sk_buff *skb, const struct ipv4_info *info,
					     int tunnel)
{
	struct l4_head h = {};

	if (!host_built(skb))
		return 0;
	if ((cluster_contains(info->saddr) && info->saddr != node_ip &&
	     info->saddr != node_health_ip) ||
	    info->saddr == LB_HAIRPIN_ADDR) /* a pod's own hairpin client's (lib/ct.h) */
		return DROP_SPOOFED_SOURCE;
	if (!tunnel || !overlay_port || info->proto != IPPROTO_UDP || !info->l4_off)
		return 0;
	if (skb->mark & HOST_SOURCE_OVERLAY) {
		skb->mark &= ~HOST_SOURCE_OVERLAY;
		return 0;
	}
	if (l4_load_head(skb, info, &h, 4) < 0 || h.dport != overlay_port)
		return 0;
	return DROP_SPOOFED_SOURCE;
}

#endif /* MYELIN_LIB_HOST_SOURCE_H */
