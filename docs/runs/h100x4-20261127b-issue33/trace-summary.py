#!/usr/bin/env python3
"""Summarises TCPX_PERF_TRACE=1 lines ("trace RANK SECONDS_SINCE_PROCESS_START EVENT") of one run:
the n-th event of every rank, with the earliest and latest rank's time."""
import collections
import re
import sys

seq = collections.defaultdict(list)
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"trace (\d+) ([\d.]+) (.*)$", line.strip())
    if m:
        seq[int(m.group(1))].append((m.group(3), float(m.group(2))))
if not seq:
    sys.exit("no trace lines")
for i in range(max(len(v) for v in seq.values())):
    ev = [v[i] for v in seq.values() if len(v) > i]
    print(f"{i:3d} {ev[0][0]:16s} ranks {len(ev):4d}  first {min(e[1] for e in ev):8.2f}  last {max(e[1] for e in ev):8.2f}")
