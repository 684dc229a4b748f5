#!/usr/bin/env python3
"""Where a netperf run's CPU goes, by stage of the packet path.

Usage: stages.py UNIT NAME=SCRIPT:RATE [NAME=SCRIPT:RATE ...]

SCRIPT is `perf script -F ip,sym` output of `perf record -C 0 -g` (or of `-a -g`
with `--cpu 0`) taken while client and server shared vCPU 0 and kept it busy;
RATE is what netperf reported for the same run: Mbit/s with UNIT mb (the table
is then µs of CPU per MB moved), transactions/s with UNIT tx (µs per
transaction). Each sample goes to the innermost frame of its stack that names
a stage; a sample inside none of them is "other". Prints a Markdown table.
"""
import collections
import re
import sys

STAGES = [
    ("copy to/from user", r"^_copy_(to|from)_iter$"),
    ("BPF programs", r"^bpf_prog_|^cls_bpf_classify$|^tcx_"),
    ("BPF redirect", r"^skb_do_redirect$"),
    ("VXLAN transmit", r"^vxlan_xmit$"),
    ("UDP + VXLAN receive", r"^(__)?udp_rcv|^udp_queue_rcv|^vxlan_rcv$"),
    ("GRO cells", r"^gro_cell_poll$|^napi_gro_receive|^dev_gro_receive$"),
    ("underlay bridge", r"^br_handle_frame$"),
    ("TCP receive (softirq)", r"^tcp_v4_rcv$|^tcp_v4_do_rcv$"),
    ("IP receive", r"^ip_rcv$|^ip_list_rcv$|^__netif_receive_skb"),
    ("device transmit", r"^__dev_queue_xmit$"),
    ("IP output", r"^ip_finish_output2$|^__ip_queue_xmit$|^ip_local_out$"),
    ("tcp_sendmsg", r"^tcp_sendmsg_locked$"),
    ("tcp_recvmsg", r"^tcp_recvmsg_locked$"),
    ("backlog queue", r"^process_backlog$"),
    ("softirq entry/exit", r"^handle_softirqs$"),
    ("scheduler", r"^__schedule$|^try_to_wake_up$"),
    ("system call", r"^do_syscall_64$"),
    ("freeing", r"^kfree_skb|^consume_skb|^skb_release|^__kfree_skb|^dst_destroy|^rcu_core"),
]
COMPILED = [(name, re.compile(p)) for name, p in STAGES]


def stage_of(stack):
    for frame in stack:  # leaf first
        for name, pattern in COMPILED:
            if pattern.search(frame):
                return name
    return "other"


def load(path):
    counts, total, stack = collections.Counter(), 0, []
    for line in list(open(path)) + [""]:
        line = line.rstrip()
        if not line:
            if stack:
                counts[stage_of(stack)] += 1
                total += 1
            stack = []
            continue
        parts = line.split()
        if len(parts) >= 2:
            stack.append(re.sub(r"\+0x.*", "", parts[1]))
    return counts, total


def main():
    unit, runs = sys.argv[1], sys.argv[2:]
    per = {"mb": lambda rate: rate / 8, "tx": lambda rate: rate}[unit]
    cols = []
    for arg in runs:
        name, rest = arg.split("=", 1)
        path, rate = rest.rsplit(":", 1)
        counts, total = load(path)
        scale = 1e6 / per(float(rate)) / total  # µs per unit per sample
        cols.append((name, {k: v * scale for k, v in counts.items()}, 1e6 / per(float(rate))))
    label = "µs per MB" if unit == "mb" else "µs per transaction"
    fmt = "%.0f" if unit == "mb" else "%.2f"
    print("| stage (%s) | %s |" % (label, " | ".join(c[0] for c in cols)))
    print("|---|" + "---|" * len(cols))
    names = [n for n, _ in STAGES] + ["other"]
    names.sort(key=lambda n: -max(c[1].get(n, 0) for c in cols))
    for n in names:
        if all(c[1].get(n, 0) == 0 for c in cols):
            continue
        print("| %s | %s |" % (n, " | ".join(fmt % c[1].get(n, 0) for c in cols)))
    print("| **total** | %s |" % " | ".join("**" + fmt % c[2] + "**" for c in cols))


if __name__ == "__main__":
    main()
