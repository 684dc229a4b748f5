/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Ring buffer events for `myelin monitor`: drops only while the agent has
 * drop_events_enabled set, traces only while it has trace_enabled set. With no
 * monitor client attached a packet costs its counter and nothing else.
 */
#ifndef MYELIN_LIB_EVENTS_H
#define MYELIN_LIB_EVENTS_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "ipv4.h"
#include "maps.h"
#include "metrics.h"

/*
 * trace_enabled lives in .bss, not .rodata: the agent flips it at runtime
 * while a trace monitor is attached. Reading it is a plain memory load.
 */
volatile __u32 trace_enabled = 0;

/*
 * drop_events_enabled is set by the agent while at least one monitor client
 * wants drop events (.bss too), so a flood of drops nobody watches costs only
 * the counter, not a ring buffer write per packet.
 */
volatile __u32 drop_events_enabled = 0;

/* events_ports reads the TCP/UDP ports into ev; they stay 0 when not available. */
static __always_inline void events_ports(struct __sk_buff *skb, const struct ipv4_info *info,
					 struct event *ev)
{
	__be16 ports[2];

	if (!info->l4_off || (info->proto != IPPROTO_TCP && info->proto != IPPROTO_UDP))
		return;
	/* A helper copy: safe whatever packet pointers earlier helpers invalidated. */
	if (bpf_skb_load_bytes(skb, info->l4_off, ports, sizeof(ports)) < 0)
		return;
	ev->sport = ports[0];
	ev->dport = ports[1];
}

/* events_emit writes one event; a full buffer is counted as REASON_EVENTS_LOST. */
static __always_inline void events_emit(struct __sk_buff *skb, const struct ipv4_info *info,
					__u8 type, __u8 dir, __u8 reason)
{
	struct event ev = {
		.type = type,
		.reason = reason,
		.dir = dir,
		.proto = info->proto,
		.ifindex = skb->ifindex,
		.saddr = info->saddr,
		.daddr = info->daddr,
		.len = skb->len,
	};

	events_ports(skb, info, &ev);
	if (bpf_ringbuf_output(&myelin_events, &ev, sizeof(ev), 0) < 0)
		metrics_add(dir, REASON_EVENTS_LOST, skb->len);
}

#endif /* MYELIN_LIB_EVENTS_H */
