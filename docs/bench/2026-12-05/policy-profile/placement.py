#!/usr/bin/env python3
"""placement.py: how often a new connection of one busy pod pair finds every candidate
bucket of myelin_policy_ct full (so policy_ct_put pushes a connection out), by placement:

  two       today: two random buckets, the first with room;
  pair      p5: a pair-local bucket, then one random bucket;
  pair+two  the pair-local bucket, then the emptier of two random buckets.

The table (32,768 buckets of 4 slots, the default 131,072 entries) is first filled to
the given share by connections of distinct pairs, then the busy pair opens 2,000 more.
"""
import random

BUCKETS, WAYS, BUSY = 32768, 4, 2000


def share_full(fill, mode, seed=1):
    rnd = random.Random(seed)
    load = [0] * BUCKETS

    def put(local, randoms):
        if local is not None and load[local] < WAYS:
            load[local] += 1
            return 0
        for b in (sorted(randoms, key=lambda b: load[b]) if mode == "pair+two" else randoms):
            if load[b] < WAYS:
                load[b] += 1
                return 0
        return 1

    def candidates(local):
        n = 1 if mode == "pair" else 2
        return local, [rnd.randrange(BUCKETS) for _ in range(n)]

    for _ in range(int(BUCKETS * WAYS * fill) - BUSY):
        put(*candidates(None if mode == "two" else rnd.randrange(BUCKETS)))
    pair_bucket = rnd.randrange(BUCKETS)
    full = sum(put(*candidates(None if mode == "two" else pair_bucket)) for _ in range(BUSY))
    return full / BUSY


for fill in (0.25, 0.5, 0.75):
    print(f"filled {fill:.0%}: " + ", ".join(f"{m} {share_full(fill, m):.1%}" for m in ("two", "pair", "pair+two")))
