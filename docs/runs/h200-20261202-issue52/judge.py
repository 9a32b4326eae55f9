#!/usr/bin/env python3
"""One line of a run's node verdicts against the NIC the driver slowed (NODE:NIC, or - for none):
whether that node is bad naming that NIC, and every other node worse than healthy.
Usage: judge.py RUN/summary.json SLOWED"""
import json
import sys

path, slowed = sys.argv[1:3]
try:
    s = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"no summary.json ({e})")
    sys.exit(0)
v = s.get("node_verdicts") or []
host, nic = (slowed.split(":") + [""])[:2] if slowed != "-" else ("", "")
mine = [x for x in v if x["host"] == host]
named = bool(mine) and mine[0]["verdict"] == "bad" and any(y["nic"] == nic for y in mine[0].get("slow_sides", []))
others = [f'{x["host"]} {x["verdict"]}' for x in v if x["host"] != host and x["verdict"] != "healthy"]
share = mine[0].get("lowest_share") if mine else None
what = f"{slowed} named {named} (share {share})" if host else f"{len(v)} verdicts"
print(f"{what}; others not healthy: {others or 'none'}; status {s.get('status')}")
