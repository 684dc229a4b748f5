/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-CPU packet and byte counters by direction and reason. */
#ifndef MYELIN_LIB_METRICS_H
#define MYELIN_LIB_METRICS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"

/* metrics_add counts one packet of len bytes under (dir, reason). */
static __always_inline void metrics_add(__u8 dir, __u8 reason, __u32 len)
{
	__u32 key = (__u32)dir * METRIC_REASONS + reason;
	struct metrics_value *v = bpf_map_lookup_elem(&myelin_metrics, &key);

	/* Per-CPU value: no other writer, plain increments are safe. */
	if (v) {
		v->packets++;
		v->bytes += len;
	}
}

#endif /* MYELIN_LIB_METRICS_H */
