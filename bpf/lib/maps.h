/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map of the datapath. All are pinned by name under the agent's pin
 * directory so a restarted agent reuses them and packets keep flowing.
 */
#ifndef MYELIN_LIB_MAPS_H
#define MYELIN_LIB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "types.h"
#include "reasons.h"

/* Defaults; the agent may override max_entries at load. */
#define ENDPOINTS_MAX_DEFAULT 1024 /* ~1000 pods per node */
#define EVENTS_RINGBUF_SIZE   (256 * 1024)
#define FLOWS_RINGBUF_SIZE    (1024 * 1024)
#define DROPS_RINGBUF_SIZE    (256 * 1024)
#define FLOW_STATE_MAX	      65536 /* UDP/ICMP flows tracked for aggregation (LRU) */
#define FLOW_LIMIT_MAX	      16384 /* DNS and drop record budgets (LRU, lib/flows.h) */
#define METRICS_MAX_ENTRIES   (METRIC_DIRS * METRIC_REASONS)
#define TUNNEL_MAX_ENTRIES    1024  /* one PodCIDR per node */
#define NAT_MAX_DEFAULT	      65536 /* two entries per masqueraded flow */
#define NOMASQ_MAX_ENTRIES    4096  /* CIDRs plus node IPs */
#define NODEPORT_SYN_MAX      16384 /* embryonic NodePort SNAT flows, two entries each */
#define NODEPORT_NAT_MAX      65536 /* established NodePort SNAT flows, two entries each */
#define NODEPORT_UDP_MAX      65536 /* answered UDP NodePort SNAT flows, two entries each */
/* Load balancing; the agent shrinks them to 1 entry when load balancing is off. */
#define LB_SERVICES_MAX	       65536  /* frontends: 10,000 services with a few ports each */
#define LB_SLOTS_MAX	       131072 /* backend slots of all services */
#define LB_BACKENDS_MAX	       65536
#define LB_AFFINITY_MAX	       65536
#define LB_CT_MAX	       262144 /* two entries per load-balanced flow */
#define LB_CT_NODEPORT_MAX     65536  /* two entries per NodePort flow from outside */
#define LB_CT_NODEPORT_SYN_MAX 32768  /* NodePort flows awaiting a local backend, UDP ones */
#define LB_PORT_WORDS	       2048   /* myelin_lb_ports, myelin_lb_nodeports: one bit per port */
#define LB_MAGLEV_SIZE	       16381 /* entries of a Maglev table; the agent sets maglev_table_size */
#define FRAGS_MAX	       8192 /* fragmented datagrams in flight (lib/frag.h) */
/* NetworkPolicy (lib/policy.h, docs/policy.md). */
#define IPCACHE_MAX    65536  /* every pod /32 of the cluster plus policy CIDRs */
#define HOST_ADDRS_MAX 16384  /* the node's own IPv4 addresses (lib/policy.h) */
#define POLICY_MAX     65536  /* (local pod, peer identity, direction) allows */
#define POLICY_CT_MAX  131072 /* one entry per connection isolated pods accepted */

/* myelin_endpoints: local pod IPv4 (network order) -> endpoint_info. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct endpoint_info);
	__uint(max_entries, ENDPOINTS_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_endpoints SEC(".maps");

/*
 * myelin_tunnel: PodCIDR of every other node -> its node IP, for tunnel
 * mode. LPM tries must be created with BPF_F_NO_PREALLOC.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tunnel_lpm_key);
	__type(value, struct tunnel_endpoint);
	__uint(max_entries, TUNNEL_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_tunnel SEC(".maps");

/*
 * myelin_tunnel_nodes: the IPs of the nodes of myelin_tunnel that take pods'
 * packets to them through the overlay (their health responders say so) ->
 * itself (the tunnel's remote), for tunnel-pod-to-node (lib/tunnel.h,
 * tunnel_node_lookup). Kept by the agent's tunnel loop in tunnel mode whatever
 * the key says; read only when it is not plain.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); /* node IP, network order */
	__type(value, struct tunnel_endpoint);
	__uint(max_entries, TUNNEL_MAX_ENTRIES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_tunnel_nodes SEC(".maps");

/*
 * myelin_snat: both directions of every masqueraded flow (see struct
 * nat_key). A plain hash, not LRU: a full map must fail the insert, which the
 * datapath drops and counts as DROP_NAT_FULL, instead of silently evicting a
 * live flow. The agent's GC (Datapath.GCNAT) frees idle entries.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct nat_key);
	__type(value, struct nat_entry);
	__uint(max_entries, NAT_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_snat SEC(".maps");

/*
 * myelin_nodeport_syn: both directions of NodePort flows to a backend on
 * another node that have not completed their handshake (lib/nodeport.h).
 * LRU: a flood of SYNs from forged sources only churns this table; nothing
 * else (masquerade, established NodePort flows, service conntrack) is touched.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct nat_key);
	__type(value, struct np_entry);
	__uint(max_entries, NODEPORT_SYN_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nodeport_syn SEC(".maps");

/*
 * myelin_nodeport_nat: NodePort TCP flows to a backend on another node past
 * the handshake, moved here from myelin_nodeport_syn (UDP ones an older
 * version moved here are found here until the agent's GC moves them to
 * myelin_nodeport_udp). A plain hash like myelin_snat: full, a flow stays
 * embryonic and the packet is dropped as DROP_NODEPORT_NAT_FULL; the agent's
 * GC (Datapath.GCNodePortNAT) frees idle flows.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct nat_key);
	__type(value, struct np_entry);
	__uint(max_entries, NODEPORT_NAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nodeport_nat SEC(".maps");

/*
 * myelin_nodeport_udp: NodePort UDP flows to a backend on another node that
 * the backend answered, moved here from myelin_nodeport_syn. An LRU: a UDP
 * "handshake" is one reply, which a sender of forged sources gets from any
 * backend that answers every datagram, so UDP flows never fill
 * myelin_nodeport_nat (TCP's, where a flood would make completed handshakes
 * drop); a UDP flood evicts idle UDP flows only. The agent's GC collects idle
 * flows here too.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct nat_key);
	__type(value, struct np_entry);
	__uint(max_entries, NODEPORT_UDP_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nodeport_udp SEC(".maps");

/* myelin_nodeport_stats: enum np_stat -> count, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, NP_STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nodeport_stats SEC(".maps");

/*
 * myelin_nomasq: destinations never masqueraded (cluster CIDR, native
 * routing CIDR, non-masquerade CIDRs, node IPs), fed by the agent in every
 * masquerade mode: they are also the cluster addresses a pod may send no
 * IPIP, 6in4 or GRE to (lib/source.h). The value is unused (1).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct nomasq_key);
	__type(value, __u8);
	__uint(max_entries, NOMASQ_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nomasq SEC(".maps");

/* myelin_lb_services: service frontend -> service (lib/lb.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_svc_key);
	__type(value, struct lb_svc);
	__uint(max_entries, LB_SERVICES_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_services SEC(".maps");

/* myelin_lb_slots: (service id, slot) -> backend id, the random choice's pool. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_slot_key);
	__type(value, __u32);
	__uint(max_entries, LB_SLOTS_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_slots SEC(".maps");

/* myelin_lb_backends: backend id -> address and port, shared by all services. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb_backend);
	__uint(max_entries, LB_BACKENDS_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_backends SEC(".maps");

/*
 * myelin_lb_ports: a bitmap of the ports (network order) a Service backend
 * may answer from, bit p in word p / 32. The agent sets a port's bit before
 * it writes the first backend with that port, and never clears one, so every
 * reverse conntrack entry of myelin_lb_ct and myelin_lb_ct_nodeport has its
 * port's bit set; a packet about to enter a pod, or a pod's packet to outside
 * the cluster, from a port without it is no reply of a Service flow and needs
 * no conntrack lookup (ct_reply_to_pod, lb_from_pod). An array: the kernel
 * inlines its lookup.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, LB_PORT_WORDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_ports SEC(".maps");

/*
 * myelin_lb_nodeports: a bitmap of the ports (network order) with a NodePort
 * frontend, laid out as myelin_lb_ports. The agent sets a port's bit before
 * it writes a NodePort frontend with it and never clears one; a packet to the
 * node's IP whose port has no bit is the node's own traffic (kubelet, SSH,
 * the apiserver...) and skips the service lookup (lb_from_netdev).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, LB_PORT_WORDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_nodeports SEC(".maps");

/*
 * myelin_lb_maglev_inner is the template of the Maglev tables: entry i ->
 * backend id. BPF_F_INNER_MAP lets tables of any size go into the outer map,
 * so a changed table size never makes the pinned outer map unusable; the
 * lookup checks the index at run time.
 */
struct myelin_lb_maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, LB_MAGLEV_SIZE);
	__uint(map_flags, BPF_F_INNER_MAP);
};

/*
 * myelin_lb_maglev: service id -> its Maglev table. Services with the same
 * table share one inner map (the agent deduplicates them).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, LB_SERVICES_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct myelin_lb_maglev_inner);
} myelin_lb_maglev SEC(".maps");

/*
 * myelin_lb_affinity: (service id, client IP) -> backend, for ClientIP
 * session affinity. LRU: a client that went away ages out by itself.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb_affinity_key);
	__type(value, struct lb_affinity);
	__uint(max_entries, LB_AFFINITY_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_affinity SEC(".maps");

/*
 * myelin_lb_ct: both directions of every load-balanced flow a pod opened
 * (lib/ct.h). A plain hash, not LRU: a full map must fail the insert, which
 * the datapath drops and counts as DROP_SVC_CT_FULL, instead of silently
 * evicting a live flow (an LRU would forget the reverse entry of a busy flow
 * as readily as an idle one). The agent's GC (Datapath.GCServiceCT) removes
 * flows idle past their state's timeout.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
	__uint(max_entries, LB_CT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_ct SEC(".maps");

/*
 * myelin_lb_ct_nodeport: the same for NodePort TCP flows from outside the
 * node to a local backend once the backend showed a completed handshake
 * (nodeport_ct.h), moved here from myelin_lb_ct_nodeport_syn. Bounded apart
 * from myelin_lb_ct: a full NodePort table never stops pods' own service
 * connections.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
	__uint(max_entries, LB_CT_NODEPORT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_ct_nodeport SEC(".maps");

/*
 * myelin_lb_ct_nodeport_syn: both entries of NodePort flows to a local
 * backend that no source has proven to be its own yet: TCP flows awaiting
 * their backend's answer (CT_F_AWAITING_REPLY), and UDP flows, which never
 * can. Anyone who reaches a NodePort creates them from any source, so an
 * LRU: a flood churns this table only, never established TCP flows, pods'
 * flows or masquerade.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
	__uint(max_entries, LB_CT_NODEPORT_SYN_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_ct_nodeport_syn SEC(".maps");

/*
 * myelin_frags: the translation of each fragmented datagram's first
 * fragment, and the NetworkPolicy checks that passed it, for its later
 * fragments (lib/frag.h). LRU: a datagram is
 * complete within the reassembly timeout, so old entries are useless and
 * go first.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, struct frag_entry);
	__uint(max_entries, FRAGS_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_frags SEC(".maps");

/* myelin_icmp_rate: one token bucket per CPU for the ICMP rejects (lib/icmp.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_rate);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_icmp_rate SEC(".maps");

/* myelin_metrics: index dir * METRIC_REASONS + reason, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct metrics_value);
	__uint(max_entries, METRICS_MAX_ENTRIES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_metrics SEC(".maps");

/* myelin_events: struct event records for `myelin monitor`. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENTS_RINGBUF_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_events SEC(".maps");

/* myelin_ipcache: pod /32s of the cluster and policy CIDRs -> peer identity (lib/policy.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct ipcache_key);
	__type(value, struct ipcache_value);
	__uint(max_entries, IPCACHE_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_ipcache SEC(".maps");

/*
 * myelin_host_addrs: the IPv4 addresses of the node's own network namespace
 * but loopback's 127/8 (the agent keeps it, datapath.SetHostAddresses) -> 1.
 * What the host's stack sends from one of them is the node's own traffic,
 * which NetworkPolicy lets into isolated pods (kubelet probes): read only
 * for a packet the host built into an isolated pod from an address other
 * than node_ip that no tracked connection passes (lib/policy.h). Not
 * preallocated: a node with kube-proxy's IPVS holds every Service address,
 * most nodes a handful.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, HOST_ADDRS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_host_addrs SEC(".maps");

/*
 * myelin_policy_eps: local pod IPv4 -> its isolation flags; no entry: not
 * isolated. The agent mirrors the flags into the pod's myelin_endpoints
 * entry, which the datapath reads first (it looks that entry up anyway);
 * this map answers for an address without an endpoint entry.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct policy_ep);
	__uint(max_entries, ENDPOINTS_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_policy_eps SEC(".maps");

/* myelin_policy: (local pod, peer identity, direction) -> allowed ports. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct policy_key);
	__type(value, struct policy_value);
	__uint(max_entries, POLICY_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_policy SEC(".maps");

/*
 * myelin_policy_ct: connections isolated pods accepted, one slot each (both
 * directions, both local ends), in buckets of POLICY_CT_WAYS slots
 * (lib/policy_ct_table.h): an array, so a lookup is a few instructions the
 * verifier inlines, with no bucket lock and no element to allocate. A
 * connection whose three buckets are full takes the slot of an old one: that
 * only makes the old one's next packet be evaluated again, never allows
 * anything. The
 * element after the last bucket is the agent's: the first 8 bytes hold the
 * hash's seed (policy_ct_seed), kept with the table across restarts, the
 * next 4 when an agent's GC round that keeps the slots' idle clocks walked it
 * last (datapath.GCPolicyCT); no program reads it. Mappable: the agent reads and writes slots under
 * their sequence counts, as the programs do (datapath.policyCTTable).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct policy_ct_bucket);
	__uint(max_entries, POLICY_CT_MAX / POLICY_CT_WAYS + 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_policy_ct SEC(".maps");

/* myelin_policy_ct_stats: enum policy_ct_stat -> count, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, POLICY_CT_STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_policy_ct_stats SEC(".maps");

/* myelin_flows: flow records for the agent's flow store (lib/flows.h). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FLOWS_RINGBUF_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_flows SEC(".maps");

/*
 * myelin_flow_drops: drop records (lib/flows.h), apart from the others, which
 * have no budget: however many connections pods open, their drops and policy
 * denials still find room. The agent reads both rings.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DROPS_RINGBUF_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_flow_drops SEC(".maps");

/*
 * myelin_flow_state: UDP/ICMP flows seen recently, so only their first
 * packet and a periodic summary make records. LRU: an evicted flow only
 * makes its next packet report it as new again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
	__uint(max_entries, FLOW_STATE_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_flow_state SEC(".maps");

/*
 * myelin_flow_limit: DNS and drop records written per budget (struct
 * flow_limit_key) in the current window, so one pod's flood can't fill
 * myelin_flows. LRU: an evicted budget starts a fresh window.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_limit_key);
	__type(value, struct flow_limit);
	__uint(max_entries, FLOW_LIMIT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_flow_limit SEC(".maps");

#endif /* MYELIN_LIB_MAPS_H */
