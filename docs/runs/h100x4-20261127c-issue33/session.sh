#!/usr/bin/env bash
# Issue 33, third session, on the 4 x H100 host: 64 A3-high nodes (64 x 4 NICs in the rig) and
# the shaped limit. Binaries in .devcarry/new, Debian's iproute2 in .devcarry/iproute2. Every run
# is `launch/cluster.sh run` on one rig, sampled every 0.5 s: peak threads and fds per process
# (/proc), the cores busy (/proc/stat), and the rounds connected so far (summary.json, rewritten
# after every connect with --connect rounds). Everything lands in $OUT.
#   PART=t: the driver on a small box (4 x 2 NICs, -g 2);
#   PART=a: 64 nodes at 500mbit: 64x1x4 -g 8 with --connect all and rounds, 64x8x4 rounds.
#   PART=b: the same rig, ulimit -n raised, TCP counters of every node: 64x1x4 -g 8 all and rounds,
#   then all with node37 eth2 at a quarter when all finished.
#   PART=c: the same rig, 64x8x4 (512 processes) with the default --connect all, then node37 eth2
#   at a quarter when it finished.
#   PART=d: 16x8x4 3 runs; scale-bench at 1gbit/500mbit (16x8x4) and 2gbit/1gbit (8x8x4); 64x1x4 -g 8
#   rounds at 1 MiB, traced, with the counters.
#   PART=e: 16x8x4 10 runs; scale-bench with a 200 ms egress queue (8x8x4, 16x8x4 at 1gbit) and
#   16x8x4 at 500mbit with the default 20 ms.
#   PART=f: 16x8x4 3 runs with each endpoint's connects started from the peers above it.
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h100x4-20261127c-issue33
OUT=${OUT:-/tmp/out}; W=/tmp/w; mkdir -p "$OUT" "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=1
export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=$PWD/.devcarry/new/tcpx-perf
source tools/iproute2-wrap.sh
iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}'; }
PART=${PART:-a}
rig() { # nodes nics rate [node:nic:rate]
  NODES=$1
  bash launch/cluster.sh down >/dev/null 2>&1
  local s; s=$(date +%s.%N)
  bash launch/cluster.sh up --nodes "$1" --nics "$2" --rate "$3" >"$W/up.log" 2>&1 || { tail -3 "$W/up.log"; return 1; }
  if [ -n "${4:-}" ]; then
    IFS=: read -r sn snic srate <<<"$4"
    bash launch/cluster.sh shape "$sn" "$snic" "$srate" >>"$W/up.log" 2>&1 || { tail -2 "$W/up.log"; return 1; }
  fi
  echo "rig $1 nodes x $2 NICs at $3 ${4:+(slow $4) }up in $(since "$s") s"
}
# Every rig namespace's TCP counters into $1-n<node>.net.
counters() {
  local n ns
  for n in $(seq 0 $((NODES - 1))); do
    ns=r$CLUSTER_RIG-node$n
    "$IP" netns exec "$ns" cat /proc/net/netstat /proc/net/snmp >"$1-n$n.net" 2>/dev/null
  done
}
# The counters' change over the run: the nonzero totals of the telling ones, and the nodes with
# the most resets sent and sockets aborted.
counter_deltas() {
  python3 - "$1" "$NODES" <<'PY'
import sys, collections
d, nodes = sys.argv[1], int(sys.argv[2])
def parse(path):
    out = {}
    lines = open(path).read().splitlines()
    for a, b in zip(lines[::2], lines[1::2]):
        ka, kb = a.split(), b.split()
        if ka[0] != kb[0]: continue
        for k, v in zip(ka[1:], kb[1:]):
            try: out[ka[0] + k] = int(v)
            except ValueError: pass
    return out
tot = collections.Counter(); per = {}
for n in range(nodes):
    try: b, a = parse(f"{d}/before-n{n}.net"), parse(f"{d}/after-n{n}.net")
    except FileNotFoundError: continue
    per[n] = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0)}
    tot.update(per[n])
keys = ["Tcp:OutRsts", "Tcp:EstabResets", "Tcp:AttemptFails", "TcpExt:TCPAbortOnClose", "TcpExt:TCPAbortOnData",
        "TcpExt:TCPAbortOnMemory", "TcpExt:TCPAbortOnTimeout", "TcpExt:TCPAbortOnLinger", "TcpExt:ListenOverflows",
        "TcpExt:ListenDrops", "TcpExt:TCPReqQFullDrop", "TcpExt:SyncookiesSent", "TcpExt:SyncookiesFailed",
        "TcpExt:TCPSynRetrans", "TcpExt:TCPTimeouts", "Tcp:RetransSegs", "TcpExt:TW", "TcpExt:TWRecycled",
        "TcpExt:TCPChallengeACK", "TcpExt:TCPSYNChallenge", "TcpExt:TCPMemoryPressures", "TcpExt:TCPBacklogDrop"]
print("   counters: " + (", ".join(f"{k.split(':')[1]} {tot[k]}" for k in keys if tot[k]) or "none of the telling ones moved"))
for k in ("Tcp:OutRsts", "TcpExt:TCPAbortOnClose", "TcpExt:TCPAbortOnData"):
    top = sorted(per, key=lambda n: -per[n].get(k, 0))[:3]
    if tot[k]: print(f"   {k.split(':')[1]} most on " + ", ".join(f"node{n} {per[n].get(k, 0)}" for n in top))
PY
  rm -f "$1"/before-n* "$1"/after-n*
}
# run NAME NP LIMIT -- tcpx-perf args: one run, sampled, with a one-line account.
run() {
  local name=$1 np=$2 limit=$3; shift 3; [ "${1:-}" = -- ] && shift
  local d=$W/$name; rm -rf "$d"; mkdir -p "$d"
  rm -f "$d/stop"
  ( t0=$(date +%s.%N)
    while [ ! -e "$d/stop" ]; do
      now=$(date +%s.%N)
      echo "T $(awk -v s="$t0" -v e="$now" 'BEGIN {printf "%.1f", e - s}') $(head -1 /proc/stat)"
      for pid in $(pgrep -x tcpx-perf); do
        echo "P $pid $(ls "/proc/$pid/task" 2>/dev/null | wc -l) $(ls "/proc/$pid/fd" 2>/dev/null | wc -l)"
      done
      [ -f "$d/run/summary.json" ] && echo "R $(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); r=((s.get("placement") or {}).get("setup") or {}).get("rounds") or []; print(sum(x.get("connects",0) for x in r), round(sum(x.get("seconds_total",0) for x in r),2), len(s.get("results") or []))' "$d/run/summary.json" 2>/dev/null)"
      sleep 0.5
    done >"$d/samples.raw" ) &
  local sampler=$! s
  [ -n "${COUNTERS:-}" ] && counters "$d/before"
  s=$(date +%s.%N)
  timeout -k 10 "$limit" bash launch/cluster.sh run -np "$np" -- "$@" --out "$d/run" >"$d/log" 2>&1
  local rc=$?
  touch "$d/stop"; wait "$sampler"
  [ -n "${COUNTERS:-}" ] && { counters "$d/after"; counter_deltas "$d"; }
  echo "== $name (np $np: $*): exit $rc in $(since "$s") s"
  awk '/^P/ { if ($3 > t) t = $3; if ($4 > f) f = $4; p[$2] = 1 }
       /^R/ { r = $0 }
       /^T/ { split($0, a, " "); b = a[4] + a[5] + a[6] + a[9] + a[10] + a[11]; i = a[7] + a[8];
              if (b0 != "") { db = b - b0; di = i - i0; if (db + di > 0) { busy += db; all += db + di } } b0 = b; i0 = i }
       END { n = 0; for (k in p) n++; printf "   %d processes, peak %d threads, %d fds per process; cores busy %.1f of %d; last rounds sample (connects, seconds, sizes done): %s\n", n, t, f, all ? busy / all * ncpu : 0, ncpu, substr(r, 3) }' ncpu="$(nproc)" "$d/samples.raw"
  grep -E "^# setup|^ +[0-9]+ +[0-9]+ +float|is slow|^# Node verdicts|^#  *node[0-9]+ +(bad|suspect)|^tcpx-perf: (error|rank [0-9]+: (error|timeout))" "$d/log" | head -14 | cut -c1-330
  [ -n "${TCPX_PERF_TRACE:-}" ] && python3 docs/runs/h100x4-20261127b-issue33/trace-summary.py "$d/log" 2>/dev/null | tail -14
  python3 - "$d/run/summary.json" <<'PY'
import json, sys
try: s = json.load(open(sys.argv[1]))
except Exception as e: print(f"   no summary ({e})"); sys.exit()
st = (s.get("placement") or {}).get("setup") or {}
print(f"   status {s.get('status')}; first timed {st.get('first_timed_s')}; setup {st.get('seconds')} s; connects {st.get('connect_seconds_total')} s; wrong {s.get('wrong_total')}; error {str(s.get('error'))[:250]}")
PY
}
{
  date -u; nproc; ulimit -n; sysctl kernel.pid_max fs.nr_open net.core.somaxconn 2>/dev/null | tr '\n' ' '; echo
  A=(--pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host)
  if [ "$PART" = t ]; then # the driver itself, on a small box
    rig 4 2 200mbit || exit 1
    TCPX_PERF_TRACE=1 COUNTERS=1 run t-rounds 4 60 -- --pattern fullmesh -b 1M -e 2M -n 3 -w 1 -T 30 --mem host -g 2 --connect ${M:-rounds} --max-peers 2
  fi
  ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"; echo "ulimit -n $(ulimit -n)"
  if [ "$PART" = f ]; then
    echo "== 16x8x4 at 2gbit, default flags, 3 runs (connects started from the peers above each endpoint)"
    bash docs/runs/h100x4-20261127b-issue33/repeat.sh "$W/f16" 16 8 4 2gbit 3 - 60 -- "${A[@]}"
  fi
  if [ "$PART" = e ]; then
    echo "== 16x8x4 at 2gbit, default flags, 10 runs (the final build)"
    bash docs/runs/h100x4-20261127b-issue33/repeat.sh "$W/e16" 16 8 4 2gbit 10 - 90 -- "${A[@]}"
    for q in 200 20; do
      echo "== tools/scale-bench.sh, egress queue $q ms"
      shapes="8x8x4@1gbit 16x8x4@1gbit"; [ $q = 20 ] && shapes="16x8x4@500mbit"
      CLUSTER_QUEUE_MS=$q OUT=$W/bench-q$q SHAPES="$shapes" SLOW_SHAPE= CUDA_SHAPE= RAW_TCP=0 \
        IPROUTE2=$PWD/.devcarry/iproute2 timeout 150 bash tools/scale-bench.sh 2>&1 | cut -c1-300
    done
  fi
  if [ "$PART" = d ]; then
    echo "== 16x8x4 at 2gbit, default flags, 3 runs (the connect window's cost at 128 ranks)"
    bash docs/runs/h100x4-20261127b-issue33/repeat.sh "$W/d16" 16 8 4 2gbit 3 - 90 -- "${A[@]}"
    echo "== tools/scale-bench.sh: the shaped limit at lower rates"
    OUT=$W/bench SHAPES="16x8x4@1gbit 16x8x4@500mbit 8x8x4@1gbit" SLOW_SHAPE= CUDA_SHAPE= \
      IPROUTE2=$PWD/.devcarry/iproute2 timeout 300 bash tools/scale-bench.sh 2>&1 | grep -vE "^#" | cut -c1-300
    rig 64 4 500mbit || exit 1
    TCPX_PERF_TRACE=1 COUNTERS=1 run g8-rounds-1m 64 100 -- --pattern fullmesh -b 1M -e 1M -n 10 -w 2 -T 60 --mem host -g 8 --connect rounds
    grep -E "WARN|rejected" "$W/g8-rounds-1m/log" | cut -c1-400 | head -6
  fi
  if [ "$PART" = c ]; then
    rig 64 4 500mbit || exit 1
    TCPX_PERF_TRACE=1 COUNTERS=1 run r512-all 512 240 -- "${A[@]}"
    if grep -q "r512-all (np.*exit 0" "$OUT/session-$PART.txt"; then
      bash launch/cluster.sh shape node37 eth2 125mbit >/dev/null 2>&1 && echo "node37 eth2 shaped to 125mbit"
      run r512-all-slow 512 240 -- "${A[@]}"
    fi
  fi
  if [ "$PART" = b ]; then
    rig 64 4 500mbit || exit 1
    TCPX_PERF_TRACE=1 COUNTERS=1 run g8-all 64 180 -- "${A[@]}" -g 8
    COUNTERS=1 run g8-rounds 64 100 -- "${A[@]}" -g 8 --connect rounds
    if grep -q "g8-all (np.*exit 0" "$OUT/session-$PART.txt"; then
      bash launch/cluster.sh shape node37 eth2 125mbit >/dev/null 2>&1 && echo "node37 eth2 shaped to 125mbit"
      run g8-all-slow 64 180 -- "${A[@]}" -g 8
    fi
  fi
  if [ "$PART" = a ]; then
    rig 64 4 500mbit || exit 1
    TCPX_PERF_TRACE=1 run g8-all 64 150 -- "${A[@]}" -g 8
    TCPX_PERF_TRACE=1 run g8-rounds 64 150 -- "${A[@]}" -g 8 --connect rounds
    run r512-rounds 512 150 -- "${A[@]}" --connect rounds
  fi
  bash launch/cluster.sh down >/dev/null 2>&1
} 2>&1 | tee "$OUT/session-$PART.txt"
for d in "$W"/*/; do find "$d" \( -name 'rank_samples.csv' -o -name 'samples.csv' -o -name '*.svg' \) -delete; done
tar czf "$OUT/logs-$PART.tgz" -C "$W" . 2>/dev/null
