/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Build unit for bpf2go. The entry files share maps, load-time config and
 * types, so they are compiled into one object and loaded as one collection
 * (one .rodata, one .bss, one set of generated Go types). Each entry file
 * still compiles on its own. Add new attach points here.
 */
#include "from_pod.c"
#include "from_netdev.c"
#include "from_overlay.c"
#include "to_netdev.c"
#include "to_overlay.c"
#include "to_pod.c"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * BTF anchors: bpf2go -type only sees types in the object's BTF, and these
 * are otherwise used only inside inlined helpers. Never read; 8 bytes of .bss each.
 */
const struct event *btf_anchor_event __attribute__((unused));
const struct flow_record *btf_anchor_flow_record __attribute__((unused));
const struct flow_dns_record *btf_anchor_flow_dns_record __attribute__((unused));
const enum flow_kind *btf_anchor_flow_kind __attribute__((unused));
const struct flow_key *btf_anchor_flow_key __attribute__((unused));
const struct flow_state *btf_anchor_flow_state __attribute__((unused));
const enum event_type *btf_anchor_event_type __attribute__((unused));
const enum reason *btf_anchor_reason __attribute__((unused));
const enum direction *btf_anchor_direction __attribute__((unused));
const enum nat_dir *btf_anchor_nat_dir __attribute__((unused));
const enum nat_flags *btf_anchor_nat_flags __attribute__((unused));
const enum lb_svc_flags *btf_anchor_lb_svc_flags __attribute__((unused));
const enum ct_dir *btf_anchor_ct_dir __attribute__((unused));
const enum ct_flags *btf_anchor_ct_flags __attribute__((unused));
const enum np_stat *btf_anchor_np_stat __attribute__((unused));
const struct lb_affinity_key *btf_anchor_lb_affinity_key __attribute__((unused));
const enum frag_stage *btf_anchor_frag_stage __attribute__((unused));
const enum policy_flags *btf_anchor_policy_flags __attribute__((unused));
const enum policy_dir *btf_anchor_policy_dir __attribute__((unused));
const enum policy_ct_ends *btf_anchor_policy_ct_ends __attribute__((unused));
const enum policy_ct_closing *btf_anchor_policy_ct_closing __attribute__((unused));
const enum policy_ct_stat *btf_anchor_policy_ct_stat __attribute__((unused));
const enum policy_ct_ref *btf_anchor_policy_ct_ref __attribute__((unused));
const struct policy_ct_entry *btf_anchor_policy_ct_entry __attribute__((unused));
