/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Load-time configuration. The agent rewrites these .rodata values before
 * loading, so the verifier sees constants and prunes the untaken branches;
 * there are no #ifdef variants of the datapath.
 */
#ifndef MYELIN_LIB_CONFIG_H
#define MYELIN_LIB_CONFIG_H

#include <linux/types.h>

/* host_routing_bpf: 1 = BPF host routing, 0 = legacy (the kernel stack routes). */
volatile const __u8 host_routing_bpf = 0;

/*
 * routing_tunnel: 1 = pods of other nodes are reached through the VXLAN
 * overlay (myelin_tunnel), 0 = native routing (the FIB).
 */
volatile const __u8 routing_tunnel = 0;

/* overlay_ifindex: the collect-metadata VXLAN device myelin_vxlan; used in tunnel mode. */
volatile const __u32 overlay_ifindex = 0;

/*
 * overlay_mac: this node's myelin_vxlan MAC. Every node's is derived from its
 * IP (see overlay_mac_of), so a sender knows the receiver's without ARP.
 */
volatile const __u8 overlay_mac[6] = {};

/*
 * masq_enabled: 1 = BPF masquerade. Packets from cluster_cidr to destinations
 * outside myelin_nomasq leave the uplink with node_ip as their source, and
 * replies are translated back on the way in.
 */
volatile const __u8 masq_enabled = 0;

/* node_ip: the masquerade source address, network order. */
volatile const __u32 node_ip = 0;

/* cluster_cidr_addr/_mask: the pod sources that are masqueraded, network order. */
volatile const __u32 cluster_cidr_addr = 0;
volatile const __u32 cluster_cidr_mask = 0;

#endif /* MYELIN_LIB_CONFIG_H */
