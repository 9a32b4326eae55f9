#!/usr/bin/env python3
"""One line of a run's figures from rank 0's TCPX_PERF_TRACE lines and the memory samples:
setup (launch to the first comms), the warm-up (first comms to the first timed iteration),
the first timed byte (launch to the first timed iteration), each size's time from its last
timed iteration to its row, rank 0's memory after the plans / the first connect / each size,
and every process's peak (VmHWM: the largest, the median, rank 0's).
Usage: figures.py RUN.log RUN.memory"""
import re
import statistics
import sys

log, mem = sys.argv[1:3]
ev = {}
gaps, mems = [], []
# Console lines cut by another: a trace or plugin line that starts inside another line.
cut = 0
for line in open(log, errors="replace"):
    # A held-back plugin line quotes the line it counts: not a cut.
    body = line[1:].replace("plugin log repeated: [plugin]", "")
    if "trace " in body and not line.startswith("trace ") or "[plugin]" in body:
        cut += 1
    m = re.match(r"^trace 0 ([\d.]+) (.*)$", line.rstrip("\n"))
    if not m:
        continue
    t, what = float(m.group(1)), m.group(2)
    ev.setdefault(what, t)
    m2 = re.match(r"size (\d+) iterations done", what)
    if m2:
        ev["last_iter"] = t
    m3 = re.match(r"size (\d+) done", what)
    if m3 and "last_iter" in ev:
        gaps.append(f"{int(m3.group(1)) >> 20}M {t - ev.pop('last_iter'):.3f}")
    m4 = re.match(r"memory after (.*): resident ([\d.]+) MB, peak ([\d.]+) MB", what)
    if m4:
        mems.append(f"{m4.group(1)} {m4.group(2)}/{m4.group(3)}")
out = []
setup, first = ev.get("first comms connected"), ev.get("first timed iteration")
if setup is not None:
    out.append(f"setup {setup:.1f} s")
if setup is not None and first is not None:
    out.append(f"warm-up {first - setup:.1f} s, first timed byte {first:.1f} s")
out.append("last iteration to row (s): " + (", ".join(gaps) or "none"))
out.append("rank 0 MB resident/peak after: " + ("; ".join(mems) or "none"))
out.append(f"lines cut by another: {cut}")
peak, rank0 = {}, None
try:
    for line in open(mem):
        f = line.split()
        if len(f) < 5:
            continue
        pid, rank, hwm = f[1], f[2], int(f[3])
        peak[pid] = max(peak.get(pid, 0), hwm)
        if rank == "0":
            rank0 = max(rank0 or 0, hwm)
except OSError:
    pass
if peak:
    v = sorted(peak.values())
    out.append(f"peak per process MB: max {v[-1] / 1024:.1f}, median {statistics.median(v) / 1024:.1f}, rank 0 {(rank0 or 0) / 1024:.1f} ({len(v)} processes)")
print("; ".join(out))
