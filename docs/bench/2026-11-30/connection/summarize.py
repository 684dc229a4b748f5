#!/usr/bin/env python3
"""Summarize `go test -bench 'Connection$'` output (stdin): per case the median of
each segment's ns over the -count runs, and each feature's difference to "off"."""
import statistics
import sys

KEYS = ['ns/syn', 'ns/synack', 'ns/ack', 'ns/request', 'ns/response',
        'ns/fin-a', 'ns/fin-b', 'ns/last-ack', 'ns/conn']

runs = {}
for line in sys.stdin:
    if not line.startswith('BenchmarkConnection/'):
        continue
    f = line.split()
    case = f[0].split('/')[1].rsplit('-', 1)[0]
    metrics = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)}
    runs.setdefault(case, []).append(metrics)

med = {c: {k: statistics.median(m[k] for m in ms) for k in KEYS} for c, ms in runs.items()}
print('case', *(k.split('/')[1] for k in KEYS))
for c, m in med.items():
    print(c, *('%.0f' % m[k] for k in KEYS))
for c, m in med.items():
    if c != 'off':
        print(c + '-off', *('%+.0f' % (m[k] - med['off'][k]) for k in KEYS))
