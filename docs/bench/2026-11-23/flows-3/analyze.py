#!/usr/bin/env python3
"""analyze.py DIR: per node (1 = flows on, 6 = flows off), BPF programs' run time per
run and agent CPU/context switches over the sampled run."""
import glob, json, os, sys, collections
d = sys.argv[1]
maps = {}
for line in open(os.path.join(d, 'flowmaps.txt')):
    p = line.split()
    if len(p) >= 3:
        maps[int(p[2].split(':')[1])] = p[1]
files = sorted(glob.glob(os.path.join(d, 'progs-*.json')), key=lambda f: float(f.split('progs-')[1][:-5]))
def load(f):
    try:
        return json.load(open(f))
    except Exception:
        return []
def bynode(progs):
    out = collections.defaultdict(dict)
    for p in progs:
        node = next((maps[m] for m in p.get('map_ids', []) if m in maps), None)
        if node and 'run_cnt' in p:
            out[node][(p['id'], p['name'])] = (p['run_time_ns'], p['run_cnt'])
    return out
# the interval with the most node-1 activity: first and last sample where programs exist
snaps = [(f, bynode(load(f))) for f in files]
snaps = [s for s in snaps if s[1]]
first, last = (snaps[0][1], snaps[-1][1]) if snaps else ({}, {})
for node in sorted(last):
    tot_ns = tot_cnt = 0
    rows = []
    for k, (ns, cnt) in last[node].items():
        ns0, cnt0 = first.get(node, {}).get(k, (0, 0))
        dn, dc = ns - ns0, cnt - cnt0
        if dc > 0:
            rows.append((k[1], dc, dn, dn / dc))
            tot_ns += dn; tot_cnt += dc
    if tot_cnt < 1000:
        continue
    print(f"{node}: {tot_cnt} runs, {tot_ns/1e6:.1f} ms, {tot_ns/tot_cnt:.0f} ns/run")
    for r in sorted(rows, key=lambda r: -r[1]):
        if r[1] > 1000:
            print(f"   {r[0]:20s} runs {r[1]:>10d}  {r[2]/1e6:8.1f} ms  {r[3]:6.0f} ns/run")
# agents
ag = collections.defaultdict(list)
for line in open(os.path.join(d, 'agents.txt')):
    p = line.split()
    if len(p) >= 7:
        ag[p[2]].append((float(p[0]), int(p[3]) + int(p[4]), int(p[5]), int(p[6])))
hz = os.sysconf('SC_CLK_TCK')
for node in sorted(ag):
    s = ag[node]
    if len(s) < 2:
        continue
    t = s[-1][0] - s[0][0]
    print(f"agent {node}: {t:.0f} s, cpu {(s[-1][1]-s[0][1])/hz:.2f} s ({(s[-1][1]-s[0][1])/hz/t*100:.1f}%), "
          f"voluntary cs {s[-1][2]-s[0][2]} ({(s[-1][2]-s[0][2])/t:.0f}/s), involuntary {s[-1][3]-s[0][3]}")
