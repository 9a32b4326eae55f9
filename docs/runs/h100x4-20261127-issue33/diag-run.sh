#!/usr/bin/env bash
# One rig run with the kernel's view of every node namespace before and after: TCP/IP counters
# (/proc/net/netstat, /proc/net/snmp), the ARP table's statistics (ip -s ntable), the tbf qdiscs'
# drops (tc -s qdisc) and the host's per-CPU backlog drops (/proc/net/softnet_stat).
#   diag-run.sh OUTDIR NODES RANKS NICS RATE -- tcpx-perf args...
# Needs TCPX_PERF, IP, TC (launch/cluster.sh's), CLUSTER_RIG. Prints one summary line.
set -u
out=$1 nodes=$2 ranks=$3 nics=$4 rate=$5; shift 5; [ "${1:-}" = -- ] && shift
cd "$(dirname "$0")/../../.." || exit 1
mkdir -p "$out"
IP=${IP:-ip} TC=${TC:-tc}
rig=${CLUSTER_RIG:-1}
ns_of() { if [ "$rig" = 0 ]; then echo "node$1"; else echo "r$rig-node$1"; fi; }
snap() { # $1 = tag
  local n
  for n in $(seq 0 $((nodes - 1))); do
    "$IP" netns exec "$(ns_of "$n")" cat /proc/net/netstat /proc/net/snmp >"$out/$1-n$n.net" 2>/dev/null
  done
  cat /proc/net/softnet_stat >"$out/$1-softnet"
}
bash launch/cluster.sh down >/dev/null 2>&1
bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$rate" >"$out/up.log" 2>&1 || { echo "rig up failed"; tail -3 "$out/up.log"; exit 1; }
snap before
# Peak threads and open files of every tcpx-perf process, every 0.2 s, until the run ends.
rm -f "$out/stop"
( while [ ! -e "$out/stop" ]; do
    for pid in $(pgrep -x tcpx-perf); do
      echo "$pid $(ls "/proc/$pid/task" 2>/dev/null | wc -l) $(ls "/proc/$pid/fd" 2>/dev/null | wc -l)"
    done
    sleep 0.2
  done >"$out/peaks.raw" ) &
sampler=$!
# Cores busy over the run (/proc/stat: all but idle and iowait).
read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ </proc/stat
start=$(date +%s.%N)
timeout -k 10 400 bash launch/cluster.sh run -np $((nodes * ranks)) -- "$@" --out "$out/run" >"$out/log" 2>&1
rc=$?
end=$(date +%s.%N)
read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
touch "$out/stop"; wait "$sampler"
busy=$(( (u2 + n2 + s2 + q2 + sq2 + st2) - (u1 + n1 + s1 + q1 + sq1 + st1) )) idle=$(( (i2 + w2) - (i1 + w1) ))
echo "busy $busy idle $idle" >"$out/cpu.txt"
awk '{ if ($2 > t) t = $2; if ($3 > f) f = $3 } END { printf "peak %d threads, %d fds per process\n", t, f }' "$out/peaks.raw" >>"$out/cpu.txt"
rm -f "$out/peaks.raw" "$out/stop"
snap after
{
  for n in $(seq 0 $((nodes - 1))); do
    for r in $(seq 1 "$nics"); do echo "== $(ns_of "$n") eth$r"; "$TC" -n "$(ns_of "$n")" -s qdisc show dev "eth$r"; done
  done
} >"$out/qdisc.txt" 2>&1
"$IP" -s ntable show name arp_cache >"$out/ntable.txt" 2>&1
dmesg 2>/dev/null | tail -30 >"$out/dmesg-tail.txt"
bash launch/cluster.sh down >/dev/null 2>&1
python3 - "$out" "$nodes" "$rc" "$start" "$end" <<'PY'
import sys, glob, json, collections
out, nodes, rc, start, end = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
def parse(path):
    d = {}
    lines = open(path).read().splitlines()
    for a, b in zip(lines[::2], lines[1::2]):
        ka, kb = a.split(), b.split()
        if ka[0] != kb[0]: continue
        for k, v in zip(ka[1:], kb[1:]):
            try: d[ka[0] + k] = int(v)
            except ValueError: pass
    return d
tot = collections.Counter(); per = {}
for n in range(nodes):
    try: b, a = parse(f"{out}/before-n{n}.net"), parse(f"{out}/after-n{n}.net")
    except FileNotFoundError: continue
    d = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0)}
    per[n] = d; tot.update(d)
keys = ["TcpExt:TCPAbortOnTimeout", "Tcp:EstabResets", "TcpExt:TCPKeepAlive", "TcpExt:TCPTimeouts", "Tcp:RetransSegs",
        "TcpExt:ListenOverflows", "TcpExt:ListenDrops", "TcpExt:TCPReqQFullDrop", "TcpExt:TCPBacklogDrop", "Tcp:OutRsts",
        "Tcp:AttemptFails", "TcpExt:TCPAbortOnClose", "TcpExt:TCPAbortOnData", "TcpExt:TCPSYNChallenge", "TcpExt:TCPChallengeACK",
        "TcpExt:TCPSynRetrans", "TcpExt:SyncookiesSent", "TcpExt:TCPRcvQDrop", "TcpExt:PruneCalled", "TcpExt:TCPOFODrop", "TcpExt:TCPZeroWindowDrop"]
def sn(path):
    return [sum(int(l.split()[i], 16) for l in open(path)) for i in (0, 1, 2)]
sb, sa = sn(f"{out}/before-softnet"), sn(f"{out}/after-softnet")
try: s = json.load(open(f"{out}/run/summary.json"))
except Exception: s = {}
setup = ((s.get("placement") or {}).get("setup") or {})
print(f"exit {rc} in {end-start:.1f} s; status {s.get('status')}; setup {setup.get('seconds')} s; error: {str(s.get('error'))[:300]}")
print("  " + ", ".join(f"{k.split(':')[1]} {tot[k]}" for k in keys if tot[k]))
cpu = open(f"{out}/cpu.txt").read().split("\n")
b, i = (int(x) for x in cpu[0].split()[1::2])
print(f"  cores busy {b / (b + i) * __import__('os').cpu_count():.1f} of {__import__('os').cpu_count()}; {cpu[1]}")
first = setup.get("first_timed_s")
if first is not None: print(f"  first timed byte {first} s after launch")
print(f"  softnet processed {sa[0]-sb[0]}, dropped {sa[1]-sb[1]}, time_squeeze {sa[2]-sb[2]}")
json.dump({"total": tot, "per_node": per}, open(f"{out}/netstat-delta.json", "w"), indent=1)
PY
rm -f "$out"/before-* "$out"/after-*
exit "$rc"
