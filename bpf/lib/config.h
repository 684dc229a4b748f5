/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Load-time configuration. The agent rewrites these .rodata values before
 * loading, so the verifier sees constants and prunes the untaken branches;
 * there are no #ifdef variants of the datapath.
 */
#ifndef MYELIN_LIB_CONFIG_H
#define MYELIN_LIB_CONFIG_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

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
 * Tunnel mode: the VXLAN UDP port (tunnel-port, network order). With it the
 * programs encapsulate and decapsulate VXLAN themselves where they can
 * (lib/tunnel.h: tunnel_encap, tunnel_decap_deliver); 0 leaves all VXLAN to
 * myelin_vxlan.
 */
volatile const __be16 tunnel_port = 0;

/*
 * tunnel_pod_to_node (tunnel-pod-to-node, tunnel mode; with legacy host routing
 * the stack encapsulates by the agent's routes and only the checks are here):
 * how pods reach the InternalIP of another node (lib/tunnel.h,
 * myelin_tunnel_nodes). TUNNEL_POD_TO_NODE_PLAIN sends such packets plain,
 * as before; ENCAPSULATE sends them through the overlay, so the receiver sees
 * their pod source vouched for by the tunnel peer rule; ENFORCE does too and
 * drops, as forged, a plain packet from a pod address to this node's IP on
 * the uplink and one from a pod of another node that anything but the
 * overlay brought into a pod (docs/datapath.md, "Pods to other nodes").
 */
enum tunnel_pod_to_node_mode {
	TUNNEL_POD_TO_NODE_PLAIN = 0,
	TUNNEL_POD_TO_NODE_ENCAPSULATE = 1,
	TUNNEL_POD_TO_NODE_ENFORCE = 2,
};
volatile const __u8 tunnel_pod_to_node = TUNNEL_POD_TO_NODE_PLAIN;

/*
 * overlay_port: myelin_vxlan's UDP port (network order) in tunnel mode,
 * whoever encapsulates (tunnel_port only when BPF does); 0 in native routing.
 * UDP to it that the node's own stack sends must be the device's
 * (lib/host_source.h).
 */
volatile const __be16 overlay_port = 0;

/*
 * node_health_ip: this node's health address (the first host address of its
 * PodCIDR, network order; 0 when unknown): the one address in the cluster
 * CIDR the node's own stack sends from (lib/host_source.h).
 */
volatile const __u32 node_health_ip = 0;

/*
 * masq_enabled: 1 = BPF masquerade. Packets from cluster_cidr to destinations
 * outside myelin_nomasq leave the uplink with node_ip as their source, and
 * replies are translated back on the way in.
 */
volatile const __u8 masq_enabled = 0;

/*
 * node_ip: this node's IPv4, network order: the masquerade source address,
 * and with load balancing the NodePort frontend address and the source of
 * NodePort traffic forwarded to a backend on another node; NetworkPolicy
 * always lets it in (the node's own traffic, kubelet probes); in tunnel mode
 * the only outer destination tunnelled packets are taken at.
 */
volatile const __u32 node_ip = 0;

/*
 * cluster_cidr_addr/_mask: the pod addresses, network order (both 0 when
 * unknown: then every address counts as one): the sources that are
 * masqueraded, with load balancing the destinations that are never a service
 * (pod to pod skips every service lookup), the destinations worth an endpoint
 * lookup, and in tunnel mode the addresses that are never their own tunnel
 * peer nor arrive unencapsulated from a pod address on the uplink.
 */
volatile const __u32 cluster_cidr_addr = 0;
volatile const __u32 cluster_cidr_mask = 0;

/*
 * local_pod_cidr_addr/_mask: this node's PodCIDR, network order, where the
 * agent drops a packet from it that another host sends (pod-source-from-hosts:
 * drop, or auto where none can be legitimate: docs/datapath.md); both 0
 * otherwise. myelin_from_netdev drops a packet
 * from it arriving on the uplink as DROP_SPOOFED_SOURCE (a host on the
 * underlay posing as a pod of this node), myelin_to_pod one the stack
 * forwards from any device but the owning pod's veth (lib/source.h).
 */
volatile const __u32 local_pod_cidr_addr = 0;
volatile const __u32 local_pod_cidr_mask = 0;

/*
 * lb_enabled: 1 = service load balancing (kube-proxy replacement): pods'
 * packets to a service frontend are translated to a backend (lib/service.h),
 * NodePort requests on the uplink too, and replies are translated back
 * wherever they enter a pod. 0 prunes every load balancing branch.
 */
volatile const __u8 lb_enabled = 0;

/*
 * sock_lb: 1 = socket-LB (bpf-lb-sock, bpf/sock.c) is configured: a Service
 * connection of this node's sockets reaches tc already translated, so flow
 * records name its Service from myelin_lb_sock_rev (lib/flows.h). Only with
 * lb_enabled; 0 prunes that lookup.
 */
volatile const __u8 sock_lb = 0;

/*
 * maglev_table_size: the entries of every Maglev table in myelin_lb_maglev,
 * a prime; 0 = no Maglev, backends are picked at random.
 */
volatile const __u32 maglev_table_size = 0;

/*
 * source_verify: 1 = a pod's IPv4 packets and ARP must carry its endpoint's
 * own address and MAC (lib/source.h); 0 = not checked
 * (enable-source-ip-verification: false, for comparing the cost only).
 */
volatile const __u8 source_verify = 1;

/*
 * policy_ct_budget: 1 = a pod the agent found holding more than its share
 * of myelin_policy_ct (policy-ct-pod-max, datapath.GCPolicyCT) is listed in
 * myelin_policy_ct_over, and a connection that would need a new entry for
 * it is dropped (DROP_POLICY_CT_BUDGET); 0 = no budget, and no lookup.
 */
volatile const __u8 policy_ct_budget = 1;

/*
 * nat_budget: 1 = a pod the agent found holding more masqueraded flows than
 * its share of myelin_snat (nat-pod-max, datapath.GCNAT) is listed in
 * myelin_snat_over, and its new flows to outside the cluster are dropped
 * (DROP_NAT_BUDGET); 0 = no budget, and no lookup.
 */
volatile const __u8 nat_budget = 1;

/*
 * lb_ct_budget: 1 = a pod the agent found holding more Service flows than its
 * share of myelin_lb_ct (lb-ct-pod-max, datapath.GCServiceCT) is listed in
 * myelin_lb_ct_over, and its new Service flows are dropped
 * (DROP_SVC_CT_BUDGET); 0 = no budget, and no lookup.
 */
volatile const __u8 lb_ct_budget = 1;

/*
 * nat_port_min/_max: the ports masquerade and NodePort SNAT translate to,
 * host order, inclusive. The agent picks them outside the node's ephemeral
 * ports (net.ipv4.ip_local_port_range), so a translated flow never takes a
 * tuple one of the node's own connections could hold.
 */
volatile const __u16 nat_port_min = 61000;
volatile const __u16 nat_port_max = 65535;

/* cluster_contains says whether addr (network order) is a pod address of the cluster. */
static __always_inline int cluster_contains(__u32 addr)
{
	return (addr & cluster_cidr_mask) == cluster_cidr_addr;
}

/*
 * local_pod_contains says whether addr (network order) is in this node's
 * PodCIDR where the agent set it for the checks of what other hosts send
 * (local_pod_cidr_addr above); always 0 otherwise, pruned at load.
 */
static __always_inline int local_pod_contains(__u32 addr)
{
	return local_pod_cidr_mask && (addr & local_pod_cidr_mask) == local_pod_cidr_addr;
}

#endif /* MYELIN_LIB_CONFIG_H */
