#!/usr/bin/env python3
"""Flows on minus off per same-vCPU TCP_CRR connection (medians of per-round differences) from results.json files of `myelin bench --bpf-stats`."""
import json,sys,statistics as st
for f in sys.argv[1:]:
    d=json.load(open(f))
    by={}
    for r in d['runs']:
        by.setdefault(r['round'],{})[r['case']]=r['values']
    on='native/bpf-same-node/tcp-crr/same-vcpu'; off='native/bpf-noflows-same-node/tcp-crr/same-vcpu'
    da=[];db=[];cpu=[];rat=[]
    for rd,cs in sorted(by.items()):
        if on in cs and off in cs:
            da.append(cs[on]['agent_us']-cs[off]['agent_us']); db.append((cs[on]['bpf_ns']-cs[off]['bpf_ns'])/1000)
            cpu.append(cs[off]['stat_cpu']); rat.append(cs[on]['rate']/cs[off]['rate'])
    m=st.median
    print(f, 'agent +%.2f us  bpf +%.2f us  conn cpu %.1f us  share %.1f%%  rate on/off %.3f'%(m(da),m(db),m(cpu),100*(m(da)+m(db))/m(cpu),m(rat)), ' agent per round',['%.2f'%x for x in da])
