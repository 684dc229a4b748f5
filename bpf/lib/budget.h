/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-pod budgets of the node's shared tables (datapath.GCNAT, GCServiceCT,
 * GCPolicyCT; docs/datapath.md "Masquerade", docs/policy.md "What eviction
 * costs"): the agent lists the pods holding more than their share of a table
 * at its last count, and the checks of lib/nat.h, lib/service.h and
 * lib/policy_ct.h refuse such a pod's new entries. The lists and their state
 * are pinned.
 */
#ifndef MYELIN_LIB_BUDGET_H
#define MYELIN_LIB_BUDGET_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "types.h"

/*
 * myelin_lb_ct_over: local pods holding more load-balanced flows in
 * myelin_lb_ct than their budget at the agent's last count
 * (datapath.GCServiceCT) -> that count. Looked up only when a pod's Service
 * flow needs new entries, and only while it lists a pod (lib/service.h,
 * lb_ct_over_budget).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, ENDPOINTS_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_lb_ct_over SEC(".maps");

/*
 * myelin_snat_over: local pods holding more masqueraded flows than their
 * budget at the agent's last count (datapath.GCNAT) -> that count. Looked up
 * only when a pod's flow needs new NAT entries, and only while it lists a pod
 * (lib/nat.h, nat_over_budget): one pod opening flows faster than they idle
 * out can't take every other pod's way out of the cluster.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, ENDPOINTS_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_snat_over SEC(".maps");

/*
 * myelin_policy_ct_over: pods holding more myelin_policy_ct entries than
 * their budget at the agent's last count (datapath.GCPolicyCT) -> that count:
 * an entry counts against the pod that opened its connection when a node
 * checked its source (a pod of this node; in tunnel mode one of another node),
 * or for another sender against the local pods that accepted it
 * (lib/policy_ct.h, policy_ct_opener). Looked up only when a connection needs
 * a new entry (policy_ct_over_budget): one pod opening connections faster
 * than they end can't evict every other pod's, nor cut a pod of its node
 * that it floods off the network.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, ENDPOINTS_MAX_DEFAULT);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_policy_ct_over SEC(".maps");

/*
 * myelin_budgets: the per-pod budgets' state, by enum budget_table: any_over,
 * set by the agent while the table's list (myelin_policy_ct_over,
 * myelin_snat_over, myelin_lb_ct_over) holds a pod, so a new entry costs one
 * array read, not a hash lookup, while no pod is over its budget; and max, the
 * budget the agent counts against, which it wrote at its last load. Pinned,
 * not .bss: an agent that adopts the pinned maps before it has read its
 * configuration (restarting, the apiserver unreachable) applies the budgets
 * with the running programs (datapath.OpenPinned).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct budget_state);
	__uint(max_entries, BUDGET_TABLES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} myelin_budgets SEC(".maps");

/* budget_any_over says whether table's list of pods over their budget holds one. */
static __always_inline int budget_any_over(__u32 table)
{
	const struct budget_state *b = bpf_map_lookup_elem(&myelin_budgets, &table);

	return b && b->any_over;
}

#endif /* MYELIN_LIB_BUDGET_H */
