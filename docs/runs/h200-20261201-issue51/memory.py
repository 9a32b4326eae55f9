#!/usr/bin/env python3
"""Every SECONDS (default 2) one line per tcpx-perf process of this host: t pid rank VmHWM VmRSS
(kB), the rank from its OMPI_COMM_WORLD_RANK. A process's VmHWM is its peak so far, so its last
line is its peak over the run (to within one interval before it exits). One process reads /proc
for all (no fork per process: 512 ranks are sampled in a few ms).
Usage: memory.py OUTFILE [SECONDS] (runs until killed)"""
import os
import sys
import time

out, every = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
start = time.time()
ranks = {}
with open(out, "a") as f:
    while True:
        t = int(time.time() - start)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/comm") as c:
                    if c.read().strip() != "tcpx-perf":
                        continue
                if pid not in ranks:
                    with open(f"/proc/{pid}/environ", "rb") as e:
                        env = dict(x.split(b"=", 1) for x in e.read().split(b"\0") if b"=" in x)
                    ranks[pid] = env.get(b"OMPI_COMM_WORLD_RANK", b"-").decode()
                hwm = rss = 0
                with open(f"/proc/{pid}/status") as s:
                    for line in s:
                        if line.startswith("VmHWM:"):
                            hwm = int(line.split()[1])
                        elif line.startswith("VmRSS:"):
                            rss = int(line.split()[1])
                if hwm:
                    f.write(f"{t} {pid} {ranks[pid]} {hwm} {rss}\n")
            except (OSError, ValueError):
                continue
        f.flush()
        time.sleep(every)
