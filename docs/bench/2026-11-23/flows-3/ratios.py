#!/usr/bin/env python3
"""ratios.py results.json: off/on per round and medians for the flows cases."""
import json, sys, statistics, collections
d = json.load(open(sys.argv[1]))
rate = collections.defaultdict(dict)
for r in d['runs']:
    v = r.get('values', {})
    m = v.get('rate', v.get('throughput_mbps'))
    if m is not None:
        rate[r['case']][r['round']] = m
print("| workload, placement | flows on (median) | flows off (median) | off/on per round | median off/on | on/off (median) |")
print("|---|---|---|---|---|---|")
for wl in ['tcp-rr', 'tcp-crr', 'tcp-stream']:
    for pl in ['same-vcpu', 'cross-vcpu']:
        on = rate.get(f'native/bpf-same-node/{wl}/{pl}', {})
        off = rate.get(f'native/bpf-noflows-same-node/{wl}/{pl}', {})
        rounds = sorted(set(on) & set(off))
        if not rounds:
            continue
        rs = [off[i] / on[i] for i in rounds]
        mon, moff = statistics.median(on.values()), statistics.median(off.values())
        print(f"| {wl}, {pl} | {mon:,.0f} | {moff:,.0f} | {' '.join(f'{x:.2f}' for x in rs)} | {statistics.median(rs):.2f} | {mon/moff:.2f} |")
