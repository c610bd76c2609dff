import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
g = collections.defaultdict(list)
for r in rows:
    g[(r["app"], r["opts"], r["method"])].append(r)
print("| configuration | method | n | forward_backward ms: min-max (max/min) | select+synchronize ms | step total ms: min-max (max/min) | times (load) |")
print("|---|---|---|---|---|---|---|")
for (app, opts, m), rs in g.items():
    fb = [r["forward_backward"] for r in rs]; tot = [r["total_ms"] for r in rs]
    ss = [r["select"] + r["synchronize"] for r in rs]
    name = f"sparc-{app} {'top-k + QSGD' if 'density' in opts else 'dense'}"
    meth = "best of 5 (main)" if m == "old" else "median of 100 steps (branch)"
    print(f"| {name} | {meth} | {len(rs)} | {min(fb):.2f}-{max(fb):.2f} ({max(fb)/min(fb):.2f}) | {min(ss):.2f}-{max(ss):.2f} | "
          f"{min(tot):.2f}-{max(tot):.2f} ({max(tot)/min(tot):.2f}) | {rs[0]['t']}-{rs[-1]['t']} ({min(r['load'] for r in rs):.1f}-{max(r['load'] for r in rs):.1f}) |")
