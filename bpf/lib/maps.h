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
#define METRICS_MAX_ENTRIES   (METRIC_DIRS * METRIC_REASONS)
#define TUNNEL_MAX_ENTRIES    1024  /* one PodCIDR per node */
#define NAT_MAX_DEFAULT	      65536 /* two entries per masqueraded flow */
#define NOMASQ_MAX_ENTRIES    4096  /* CIDRs plus node IPs */

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
 * myelin_nomasq: destinations never masqueraded (cluster CIDR, native
 * routing CIDR, non-masquerade CIDRs, node IPs), fed by the agent. The value
 * is unused (1).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct nomasq_key);
	__type(value, __u8);
	__uint(max_entries, NOMASQ_MAX_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_nomasq SEC(".maps");

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

#endif /* MYELIN_LIB_MAPS_H */
