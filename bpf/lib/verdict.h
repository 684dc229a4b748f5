/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Verdicts. Every program returns through one of these so each packet is
 * counted exactly once and every drop carries a reason (and an event while a
 * monitor client wants drops).
 */
#ifndef MYELIN_LIB_VERDICT_H
#define MYELIN_LIB_VERDICT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include "events.h"
#include "flows.h"
#include "metrics.h"

/*
 * verdict_count_drop counts a dropped packet and emits its drop event (while a
 * monitor wants drops) without deciding its fate: for a drop that is answered
 * (lib/icmp.h rewrites the packet into the answer), so the program returns the
 * answer's redirect.
 */
static __always_inline void verdict_count_drop(struct __sk_buff *skb, const struct ipv4_info *info,
					       __u8 dir, __u8 reason)
{
	metrics_add(dir, reason, skb->len);
	if (drop_events_enabled)
		events_emit(skb, info, EVENT_DROP, dir, reason);
	if (flows_enabled)
		flows_drop(skb, info, dir, reason);
}

/* verdict_drop drops the packet, counting it and emitting a drop event when enabled. */
static __always_inline int verdict_drop(struct __sk_buff *skb, const struct ipv4_info *info,
					__u8 dir, __u8 reason)
{
	verdict_count_drop(skb, info, dir, reason);
	return TC_ACT_SHOT;
}

/* verdict_trace counts a non-drop outcome and traces it when enabled. */
static __always_inline void verdict_trace(struct __sk_buff *skb, const struct ipv4_info *info,
					  __u8 dir, __u8 reason)
{
	metrics_add(dir, reason, skb->len);
	if (trace_enabled)
		events_emit(skb, info, EVENT_TRACE, dir, reason);
	if (flows_enabled)
		flows_forward(skb, info, dir, reason);
}

/* verdict_pass hands the packet to the kernel stack. */
static __always_inline int verdict_pass(struct __sk_buff *skb, const struct ipv4_info *info,
					__u8 dir)
{
	verdict_trace(skb, info, dir, REASON_PASS_STACK);
	return TC_ACT_OK;
}

/*
 * verdict_redirect returns the result of a redirect helper. The helpers only
 * fail synchronously on bad arguments; a target that vanished before the
 * redirect runs is dropped by the kernel later, out of our sight.
 */
static __always_inline int verdict_redirect(struct __sk_buff *skb, const struct ipv4_info *info,
					    __u8 dir, long ret)
{
	if (ret != TC_ACT_REDIRECT)
		return verdict_drop(skb, info, dir, DROP_REDIRECT_FAILED);
	verdict_trace(skb, info, dir, REASON_FORWARDED);
	return TC_ACT_REDIRECT;
}

#endif /* MYELIN_LIB_VERDICT_H */
