"""One line per run: exit, wall time, the verdicts that are not healthy (is the slowed NIC's node
named, naming its NIC? anybody else?), the probe's time and the slowed side's probe share, the
sweep's pair figures (the slowed NIC's share of the median pair at the top size, the lowest
innocent sending side), pairs above their link, busbw at the top size."""
import csv, json, os, statistics, sys
d, name, rc, wall, slow = sys.argv[1:]
try:
    s = json.load(open(os.path.join(d, "summary.json")))
except Exception as e:
    print(f"{name}: exit {rc} in {wall} s; slow {slow}; no summary ({e})"); sys.exit()
sn, snic = (slow.split(":") + [""])[:2] if slow != "-" else ("", "")
vs = s.get("node_verdicts") or []
bad = [v for v in vs if v["verdict"] != "healthy"]
named = [v for v in bad if v["host"] == sn and snic in v["evidence"]]
others = [v["host"] for v in bad if v["host"] != sn]
ok = (not sn and not bad) or (sn and named and not others)
probe = s.get("probe") or {}
res = s.get("results") or []
top = res[-1] if res else {}
line = (f"{name}: {'OK ' if ok else 'BAD'} exit {rc} in {wall} s; slow {slow}; verdicts {len(vs)}, not healthy: "
        + ("; ".join(f"{v['host']} {v['verdict']} ({v.get('decided_by')}): {v['evidence'][:90]}" for v in bad) or "none")
        + f"; probe {probe.get('seconds', 0):.1f} s {probe.get('bytes', 0) / 1e9:.2f} GB"
        + (f" skipped: {probe['skipped']}" if probe.get("skipped") else "")
        + f"; busbw@{top.get('size_bytes')} {top.get('busbw_gbps', 0):.4f}")
low = min((v.get("lowest_share") or 9, v["host"]) for v in vs if v["host"] != sn) if vs else None
if low: line += f"; lowest innocent probe share {low[0]:.2f} ({low[1]})"
p = os.path.join(d, "pairs.csv")
if os.path.exists(p):
    nic = {(r["rank"], r["gpu"]): r["nic"] for r in s["placement"]["rows"]}
    rows = [r for r in csv.DictReader(open(p)) if int(r["size_bytes"]) == top.get("size_bytes")]
    rated = [r for r in rows if r.get("gbps")]
    above = sum(1 for r in rows if r.get("above_link") == "true")
    if rated:
        med = statistics.median(float(r["gbps"]) for r in rated)
        side = {}
        for r in rated:
            k = (r["src_host"], nic[(int(r["dst_rank"]), int(r["dst_gpu"]))])
            side.setdefault(k, []).append(float(r["gbps"]) / med)
        shares = {k: statistics.median(v) for k, v in side.items()}
        slowed = shares.get((sn, snic))
        inn = min((v, k) for k, v in shares.items() if k != (sn, snic))
        line += (f"; sweep pairs@top: slowed side {slowed if slowed is None else round(slowed, 2)}, lowest other sending side "
                 f"{inn[0]:.2f} ({inn[1][0]} {inn[1][1]}), above link {above} of {len(rows)}")
print(line)
