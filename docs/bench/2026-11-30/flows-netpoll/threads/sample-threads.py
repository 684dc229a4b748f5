import os,time,sys
# sample per-thread utime+stime and ctx switches of all myelin-agent processes over a window
def agents():
    out=[]
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                if open(f'/proc/{p}/comm').read().strip()=='myelin-agent': out.append(p)
            except: pass
    return out
def snap(pid):
    d={}
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            st=open(f'/proc/{pid}/task/{t}/stat').read().rsplit(')',1)[1].split()
            ut,stt=int(st[11]),int(st[12]); nice=int(st[16])
            sc=open(f'/proc/{pid}/task/{t}/status').read()
            v=int([l for l in sc.splitlines() if l.startswith('voluntary_ctxt')][0].split()[1])
            nv=int([l for l in sc.splitlines() if l.startswith('nonvoluntary_ctxt')][0].split()[1])
            rt=int(open(f'/proc/{pid}/task/{t}/schedstat').read().split()[0])
            d[t]=(rt,ut,stt,v,nv,nice)
        except Exception: pass
    return d
win=float(sys.argv[1])
a={p:snap(p) for p in agents()}
time.sleep(win)
for p in a:
    try:
        b=snap(p)
    except FileNotFoundError:
        continue
    rows=[]
    for t in b:
        if t in a[p]:
            x,y=a[p][t],b[t]
            rows.append((y[0]-x[0],(y[1]-x[1]),(y[2]-x[2]),y[3]-x[3],y[4]-x[4],y[5],t))
    tot=sum(r[0] for r in rows)
    if tot/win/1e6 < 5: continue
    print(f"pid {p}: total {tot/win/1e6:.1f} ms/s")
    for r in sorted(rows,reverse=True)[:6]:
        print(f"  tid {r[6]} nice {r[5]}: {r[0]/win/1e6:.1f} ms/s (user {r[1]*10/win:.0f} sys {r[2]*10/win:.0f} ms/s) vol {r[3]/win:.0f}/s invol {r[4]/win:.0f}/s")
