#!/usr/bin/env python3
"""One line for a run: rank 0's setup and each size's wall time (TCPX_PERF_TRACE's "first comms
connected" and "size N done"), the last rank's first timed iteration, the sampled peaks of
threads and fds per process, and summary.json's threads_peak/fds_peak maxima.
Usage: times.py RUN.log RUN.samples RUN/summary.json"""
import json
import re
import sys

log, samples, summary = sys.argv[1:4]
t0, sizes, firsts = None, [], []
for line in open(log, errors="replace"):
    m = re.match(r"^trace (\d+) ([\d.]+) (.*)$", line.rstrip("\n"))
    if not m:
        continue
    rank, t, what = int(m.group(1)), float(m.group(2)), m.group(3)
    if what == "first timed iteration":
        firsts.append(t)
    if rank != 0:
        continue
    if what == "first comms connected":
        t0 = t
    m2 = re.match(r"size (\d+) done", what)
    if m2:
        sizes.append((int(m2.group(1)), t))
out = []
if t0 is not None:
    out.append(f"setup to {t0:.1f} s")
prev = t0
per = []
for size, t in sizes:
    per.append(f"{size >> 20}M {t - prev:.2f}")
    prev = t
out.append("per size (s): " + (", ".join(per) or "none"))
if firsts:
    out.append(f"first timed iteration done by {max(firsts):.1f} s ({len(firsts)} ranks)")
threads = fds = 0
try:
    for line in open(samples):
        f = line.split()
        i = f.index("procs")
        threads, fds = max(threads, int(f[i + 2])), max(fds, int(f[i + 3]))
except (OSError, ValueError, IndexError):
    pass
out.append(f"sampled peak threads {threads} fds {fds}")
try:
    setup = json.load(open(summary))["placement"]["setup"]
    out.append(f"summary threads_peak {max(setup['threads_peak'])} fds_peak {max(setup['fds_peak'])}")
except (OSError, ValueError, KeyError, TypeError):
    out.append("summary: none")
print("; ".join(out))
