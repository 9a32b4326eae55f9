#!/usr/bin/env python3
"""The summary lines of one tools/scale-bench.sh run (its folder DIR), printed to stdout.

    scale_bench_report.py DIR NODES NICS RATE PROCESSES CORES

DIR holds run/ (tcpx-perf's --out), log.ts (each output line with its arrival time), stat.raw
(the time and /proc/stat's cpu line every 0.2 s), raw.json (tools/raw_tcp_cpu.py's two lines),
counters.before/after (every rig namespace's /proc/net/snmp, /proc/net/netstat, `tc -s qdisc`,
and the ARP table's statistics). Whatever is missing is said, never guessed.
"""
import csv
import json
import re
import statistics
import sys

# A host this busy (share of its cores) during a size is the likely limit of that size.
CPU_BOUND_SHARE = 0.9
# The kernel counters summed over namespaces: (file prefix, name, label).
KERNEL = [("TcpExt", "TCPAbortOnTimeout", "TCPAbortOnTimeout"), ("Tcp", "EstabResets", "EstabResets"),
          ("TcpExt", "TCPKeepAlive", "TCPKeepAlive"), ("TcpExt", "TCPTimeouts", "TCPTimeouts"),
          ("Tcp", "RetransSegs", "RetransSegs")]
NEIGH = ["res_failed", "forced_gc_runs", "table_fulls"]


def tbf_burst(bps):
    """launch/cluster.sh's tbf bucket for a NIC of `bps` bits/s: 4 ms at the rate, >= 128 KiB."""
    return max(bps / 8 / 250, 131072)


def rate_bits(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def stat_samples(path):
    """[(time, busy jiffies, total jiffies)] from stat.raw."""
    out = []
    try:
        for line in open(path):
            f = line.split()
            if len(f) < 10 or f[1] != "cpu":
                continue
            j = [int(x) for x in f[2:10]]  # user nice system idle iowait irq softirq steal
            out.append((float(f[0]), sum(j) - j[3] - j[4], sum(j)))
    except OSError:
        pass
    return out


def busy_cores(samples, start, end, cores):
    """Cores busy on average over [start, end]: the last sample at or before start to the first
    at or after end (a window shorter than the sampling is widened to it)."""
    before = [s for s in samples if s[0] <= start]
    after = [s for s in samples if s[0] >= end]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    return (b[1] - a[1]) / (b[2] - a[2]) * cores if b[2] > a[2] else None


def size_windows(log_ts):
    """{size_bytes: (start, end)}: a size runs from the previous row (or the setup line) to its row."""
    windows, last = {}, None
    try:
        lines = open(log_ts).read().splitlines()
    except OSError:
        return windows
    for line in lines:
        t, _, text = line.partition(" ")
        if text.startswith("# setup:"):
            last = float(t)
        m = re.match(r"\s+(\d+)\s+\d+\s+\w+\s", text)
        if m and last is not None:
            windows[int(m.group(1))] = (last, float(t))
            last = float(t)
    return windows


def raw_tcp(path):
    """Raw TCP's (cpu_s per GB, GB/s) from raw.json, or None."""
    try:
        sides = {j["side"]: j for j in map(json.loads, open(path).read().split("\n")[:-1])}
        send, recv = sides["send"], sides["recv"]
    except (OSError, KeyError, ValueError):
        return None
    if not recv["bytes"]:
        return None
    cpu = send["user_s"] + send["sys_s"] + recv["user_s"] + recv["sys_s"]
    return cpu / (recv["bytes"] / 1e9), recv["bytes"] / 1e9 / recv["wall_s"]


def parse_counters(path):
    """(TCP counters summed over namespaces, qdisc drops/overlimits summed, ARP table stats)."""
    tcp, qdisc, neigh = {}, {"dropped": 0, "overlimits": 0}, {}
    try:
        text = open(path).read()
    except OSError:
        return None
    for block in re.split(r"^== ", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        if head.startswith("ns "):
            lines = [l.split() for l in body.splitlines() if l]
            for names, values in zip(lines[::2], lines[1::2]):
                if names and values and names[0] == values[0]:
                    for n, v in zip(names[1:], values[1:]):
                        if v.lstrip("-").isdigit():
                            key = names[0].rstrip(":") + n
                            tcp[key] = tcp.get(key, 0) + int(v)
        elif head.startswith("qdisc "):
            for m in re.finditer(r"dropped (\d+), overlimits (\d+)", body):
                qdisc["dropped"] += int(m.group(1))
                qdisc["overlimits"] += int(m.group(2))
        elif head == "ntable":
            for name in NEIGH:
                m = re.search(rf"\b{name} (\d+)", body)
                if m:
                    neigh[name] = int(m.group(1))
    return tcp, qdisc, neigh


def kernel_line(before, after):
    if before is None or after is None:
        return "   kernel: counters not read"
    d = lambda a, b, k: b.get(k, 0) - a.get(k, 0)
    tcp = ", ".join(f"{label} {d(before[0], after[0], p + n)}" for p, n, label in KERNEL)
    qd = f"qdisc drops {d(before[1], after[1], 'dropped')}, overlimits {d(before[1], after[1], 'overlimits')}"
    arp = ", ".join(f"{n} {d(before[2], after[2], n)}" if n in after[2] else f"{n} n/a" for n in NEIGH)
    return f"   kernel (all namespaces, run delta): {tcp}; {qd}; ARP {arp}"


def main(argv):
    folder, nodes, nics, rate, procs, cores = argv[1], int(argv[2]), int(argv[3]), argv[4], int(argv[5]), int(argv[6])
    run = f"{folder}/run"
    limit = nodes * nics * rate_bits(rate) / 8 / 1e9  # GB/s, one direction
    raw = raw_tcp(f"{folder}/raw.json")
    print("   raw TCP through the rig (node0 -> node1 eth1): "
          + (f"{raw[0]:.2f} cpu_s/GB at {raw[1]:.3f} GB/s" if raw else "not measured"))
    try:
        s = json.load(open(f"{run}/summary.json"))
    except (OSError, ValueError) as e:
        print(f"   no summary.json: {e}")
        s = None
    if s is not None:
        setup = (s.get("placement") or {}).get("setup") or {}
        print(f"   status {s.get('status')}, complete {s.get('complete')}, setup {setup.get('seconds', float('nan')):.2f} s"
              f" ({setup.get('comms')} comms), error: {s.get('error')}")
        rows = list(csv.DictReader(open(f"{run}/results.csv"))) if s.get("sizes_done") else []
        eps = s.get("endpoints", 0)
        samples = stat_samples(f"{folder}/stat.raw")
        windows = size_windows(f"{folder}/log.ts")
        for r, j in zip(rows, s.get("results", [])):
            size = int(r["size_bytes"])
            net = float(r["netbw_gbps"]) * eps
            tx = [w["tx_bytes"] for w in j["bytes"]["wire"] if w["iface"] != "eth0"]
            med = statistics.median(tx) if tx else 0
            spread = f"NIC tx min/max over median {min(tx)/med:.2f}/{max(tx)/med:.2f}" if med else "no NIC counters"
            # The most the shapers let through in one iteration of time t: the rate for t plus a
            # full bucket per NIC, when the gap before the iteration (the barrier) refilled it.
            t = float(r["time_us"]) / 1e6
            bucketed = limit + nodes * nics * tbf_burst(rate_bits(rate)) / t / 1e9 if t > 0 else limit
            print(f"   {size >> 20:>4} MiB: busbw {float(r['busbw_gbps']):.3f} GB/s, network {net:.3f} GB/s = {net/limit:.2f} of {limit:.2f}"
                  f" ({net/bucketed:.2f} of {bucketed:.2f} with the buckets)"
                  f"; peers in flight {r['recv_peers_in_flight']}; tcp timeouts {r.get('tcp_timeouts')}, retrans {r.get('tcp_retrans_segs')}; {spread}")
            print("        " + cpu_line(r, procs, cores, raw, busy_cores(samples, *windows[size], cores) if size in windows else None))
        if windows:
            whole = busy_cores(samples, min(w[0] for w in windows.values()), max(w[1] for w in windows.values()), cores)
            if whole is not None:
                verdict = f"CPU-bound: {whole:.1f} of {cores} cores busy" if whole >= CPU_BOUND_SHARE * cores \
                    else f"not CPU-bound: {whole:.1f} of {cores} cores busy"
                print(f"   timed part (every size, warm-up included): {verdict} (the host's /proc/stat: other jobs count too)")
        for f in (s.get("placement") or {}).get("findings", []):
            if f.get("level") != "ok":
                print(f"   {f['level']} ({len(f['text'])} chars): {f['text']}")
    print(kernel_line(parse_counters(f"{folder}/counters.before"), parse_counters(f"{folder}/counters.after")))


def cpu_line(row, procs, cores, raw, host_busy):
    """One size's CPU: the host's busy cores, tcpx-perf's own, cpu_s/GB next to raw TCP's."""
    own = float(row.get("cpu_cores_per_rank") or "nan") * procs
    per_gb = row.get("cpu_s_per_gb") or ""
    parts = [f"host {host_busy:.1f} of {cores} cores busy" if host_busy is not None else "host busy: not sampled",
             f"tcpx-perf {own:.1f} cores",
             f"cpu_s/GB {float(per_gb):.2f}" if per_gb else "cpu_s/GB n/a"]
    if raw and per_gb:
        parts[-1] += f" (raw TCP {raw[0]:.2f}, x{float(per_gb) / raw[0]:.1f})"
    line = "cpu: " + ", ".join(parts)
    if host_busy is not None and host_busy >= CPU_BOUND_SHARE * cores:
        line = f"CPU-bound: {host_busy:.1f} of {cores} cores busy; " + line
    return line


if __name__ == "__main__":
    main(sys.argv)
