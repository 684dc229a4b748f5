#!/usr/bin/env python3
"""attr.py OUT: what policy adds per connection, by symbol, from profile.sh's output.

Each bench line "round R/N CASE: rate X" ends a 3 s run of CASE; the samples of
that window (less 50 ms at either end) are counted per (vCPU, symbol) and turned
into microseconds per connection (samples / 1999 Hz / connections in the window).
For each policy case and its baseline it prints, as differences of the two cases'
medians over the rounds, each vCPU's total (idle included), the agents' own code and
the symbols whose cost grew or shrank most.
"""
import collections
import re
import statistics
import sys

HZ, RUN_S, EDGE_S = 1999.0, 3.0, 0.05

out = sys.argv[1]
windows = []  # (start, end, case, round, rate)
for line in open(f"{out}/bench.log"):
    m = re.match(r"(\d+\.\d+) bench: round (\d+)/\d+ (\S+): rate (\d+)", line)
    if m:
        end = float(m.group(1))
        windows.append((end - RUN_S + EDGE_S, end - EDGE_S, m.group(3), int(m.group(2)), int(m.group(4))))
windows.sort()

samples = collections.defaultdict(collections.Counter)  # (case, round) -> (cpu, symbol) -> n
for line in open(f"{out}/perf.txt"):
    f = line.split(None, 3)  # [cpu] time: ip symbol (dso)
    if len(f) < 4:
        continue
    try:
        cpu, t = int(f[0].strip("[]")), float(f[1].rstrip(":"))
    except ValueError:
        continue
    sym = re.sub(r"\+0x[0-9a-f]+", "", f[3].strip())
    for start, end, case, rnd, _ in windows:
        if start <= t <= end:
            samples[(case, rnd)][(cpu, sym)] += 1
            break

rate = {(w[2], w[3]): w[4] for w in windows}
keys = set().union(*samples.values()) if samples else set()


def us_per_conn(case, pick):
    """Median over rounds of the µs per connection of the (cpu, symbol) keys pick selects."""
    vals = []
    for (c, rnd), n in samples.items():
        if c == case:
            conns = rate[(c, rnd)] * (RUN_S - 2 * EDGE_S)
            vals.append(sum(v for k, v in n.items() if pick(k)) / HZ / conns * 1e6)
    return statistics.median(vals) if vals else 0.0


cases = sorted({w[2] for w in windows})
for policy in (c for c in cases if "bpf-policy-" in c):
    base = policy.replace("bpf-policy-", "bpf-")
    print(f"== {policy} against {base}")
    for cpu in (0, 1):
        b, p = us_per_conn(base, lambda k: k[0] == cpu), us_per_conn(policy, lambda k: k[0] == cpu)
        print(f"vCPU {cpu}: {b:.2f} -> {p:.2f} µs per connection ({p - b:+.2f}; idle included)")
    agent = lambda k: "myelin-agent" in k[1]
    b, p = us_per_conn(base, agent), us_per_conn(policy, agent)
    print(f"myelin-agent (its own code, both agents): {b:.2f} -> {p:.2f} µs per connection ({p - b:+.2f})")
    rows = sorted(((us_per_conn(policy, lambda k, key=key: k == key) - us_per_conn(base, lambda k, key=key: k == key), key)
                   for key in keys), reverse=True)
    for d, (cpu, sym) in rows[:12] + rows[-4:]:
        print(f"{d:+.3f} µs  vCPU {cpu}  {sym}")
