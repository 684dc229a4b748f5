/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The clock of the flow tables' timestamps: when a flow was created or last
 * seen (conntrack, NAT, NodePort, affinity, flow summaries). They are read
 * per packet, to refresh an entry at most once a second, and by the agent's
 * GC against timeouts of seconds, so they need no more than a tick's
 * resolution: CLOCK_MONOTONIC_COARSE, which trails the agent's
 * CLOCK_MONOTONIC (MonotonicNow) by at most a tick, without the clock
 * source read bpf_ktime_get_ns makes per call. Every writer and reader of a
 * table's timestamps uses this one clock, so an age is never negative.
 * Flow records' ktime and the ICMP rate limit keep bpf_ktime_get_ns.
 */
#ifndef MYELIN_LIB_CLOCK_H
#define MYELIN_LIB_CLOCK_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

static __always_inline __u64 clock_coarse_ns(void)
{
	return bpf_ktime_get_coarse_ns();
}

/*
 * clock_age_ns is how long before now a timestamp was written: 0 for one
 * ahead of now, which another CPU's refresh after this program read the
 * clock can write, as can programs of an older version on the precise clock
 * (pinned maps outlive an upgrade). Unsigned, it would wrap and make a fresh
 * entry look ancient where an age decides something (a NodePort port's
 * reclaim, an affinity's expiry).
 */
static __always_inline __u64 clock_age_ns(__u64 now, __u64 then)
{
	return (__s64)(now - then) < 0 ? 0 : now - then;
}

#endif /* MYELIN_LIB_CLOCK_H */
