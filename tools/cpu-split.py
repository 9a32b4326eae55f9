#!/usr/bin/env python3
"""Where a running job's CPU goes, per thread class, per GB on the wire (no perf needed).

    cpu-split.py SECONDS [--name tcpx-perf] [--json FILE]

Reads every thread of every process named NAME twice, SECONDS apart, from /proc: user and
system CPU (`/proc/PID/task/TID/stat`), context switches (`.../status`), and the bytes sent on
the `eth*` interfaces of each process's network namespace (`/proc/PID/net/dev`, once per
namespace: on a launch/cluster.sh rig every node is one). Prints per thread class the CPU
seconds, their share, CPU-s per GB sent (GB = 10^9 bytes, payload and headers) and context
switches per MB, then the total; `--json` writes the same figures.

Classes, by thread name: tcpx-perf's `endpoint-*` (the progress loops), its main thread (MPI,
the crew), `watchdog` and the other named harness threads; the plugin's `tcpxemu-*` threads
(data sockets, event loops, the acceptor, the ctrl watcher); anything else (MPI's and libraries'
unnamed threads) as "other". The endpoint threads run the plugin's `isend`/`irecv`/`test` too
(control messages, matching): what they spend in the plugin is in "endpoint".

Sample a steady stretch (one size, many iterations) so that setup and the reductions stay out.
Exit 1 with one line when no process is found or /proc cannot be read.
"""
import argparse
import json
import os
import re
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def thread_class(pid, tid, name, proc_name):
    if name.startswith("endpoint"):
        return "harness: endpoint threads"
    if tid == pid:
        return "harness: main thread"
    if name.startswith("tcpxemu-"):
        return "plugin: " + re.sub(r"\d+$", "", name)
    if name == proc_name[:15]:
        return "other (MPI, unnamed)"
    return "harness: " + re.sub(r"-?\d+$", "", name)


def read_task(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        stat = f.read()
    # The name is in parentheses and may hold spaces; the fields after it are fixed.
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    switches = 0
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                switches += int(line.split()[1])
    return name, utime, stime, switches


def eth_tx_bytes(pid):
    total = 0
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            iface, data = line.split(":", 1)
            if iface.strip().startswith("eth"):
                total += int(data.split()[8])
    return total


def snapshot(proc_name):
    tasks, namespaces = {}, {}
    for pid_s in os.listdir("/proc"):
        if not pid_s.isdigit():
            continue
        pid = int(pid_s)
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != proc_name[:15]:
                    continue
            ns = os.stat(f"/proc/{pid}/ns/net").st_ino
            if ns not in namespaces:
                namespaces[ns] = eth_tx_bytes(pid)
            for tid_s in os.listdir(f"/proc/{pid}/task"):
                tid = int(tid_s)
                tasks[(pid, tid)] = read_task(pid, tid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread or process that ended while we read
    return tasks, namespaces


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seconds", type=float)
    ap.add_argument("--name", default="tcpx-perf")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        t0, ns0 = snapshot(a.name)
        if not t0:
            sys.exit(f"cpu-split.py: no process named {a.name}: start the job first")
        time.sleep(a.seconds)
        t1, ns1 = snapshot(a.name)
    except OSError as e:
        sys.exit(f"cpu-split.py: cannot read /proc: {e}")
    sent = sum(ns1[k] - ns0[k] for k in ns1 if k in ns0)
    classes = {}
    for key, (name, u1, s1, w1) in t1.items():
        if key not in t0:
            continue
        _, u0, s0, w0 = t0[key]
        c = classes.setdefault(thread_class(key[0], key[1], name, a.name), [0.0, 0.0, 0, 0])
        c[0] += (u1 - u0) / TICK
        c[1] += (s1 - s0) / TICK
        c[2] += w1 - w0
        c[3] += 1
    total = sum(c[0] + c[1] for c in classes.values())
    procs = len({k[0] for k in t1})
    gb = sent / 1e9
    print(f"# {procs} processes, {len(ns1)} namespaces, {a.seconds:g} s: {sent / 1e9:.3f} GB sent on eth*, "
          f"{total:.2f} CPU-s ({total / a.seconds:.1f} cores)")
    print(f"{'class':34s} {'threads':>7s} {'user_s':>8s} {'sys_s':>8s} {'share':>6s} {'cpu_s/GB':>9s} {'switch/MB':>10s}")
    rows = []
    for name, (u, s, w, n) in sorted(classes.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        per_gb = (u + s) / gb if gb > 0 else float("nan")
        per_mb = w / (sent / 1e6) if sent > 0 else float("nan")
        share = (u + s) / total if total > 0 else 0.0
        print(f"{name:34s} {n:7d} {u:8.2f} {s:8.2f} {share:6.1%} {per_gb:9.3f} {per_mb:10.1f}")
        rows.append({"class": name, "threads": n, "user_s": u, "sys_s": s, "share": share,
                     "cpu_s_per_gb": per_gb, "switches_per_mb": per_mb})
    per_gb = total / gb if gb > 0 else float("nan")
    print(f"{'total':34s} {sum(r['threads'] for r in rows):7d} {sum(r['user_s'] for r in rows):8.2f} "
          f"{sum(r['sys_s'] for r in rows):8.2f} {1:6.1%} {per_gb:9.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seconds": a.seconds, "processes": procs, "bytes_sent": sent, "cpu_s": total,
                       "cpu_s_per_gb": per_gb, "classes": rows}, f, indent=1)


if __name__ == "__main__":
    main()
