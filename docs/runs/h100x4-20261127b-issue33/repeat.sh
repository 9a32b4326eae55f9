#!/usr/bin/env bash
# Runs on one rig, each timed from launch, with one line per run: exit, status, first timed byte,
# setup, node verdicts that are not healthy, the slow-NIC finding (its length), busbw at the top size.
#   repeat.sh OUTDIR NODES RANKS NICS RATE COUNT SLOW(node:nic:rate or -) TIMEOUT -- tcpx-perf args
# BIN dir of tcpx-perf, IP/TC as launch/cluster.sh; CLUSTER_GPUS_PER_NODE as the caller sets it.
set -u
out=$1 nodes=$2 ranks=$3 nics=$4 rate=$5 count=$6 slow=$7 limit=$8; shift 8; [ "${1:-}" = -- ] && shift
cd "$(dirname "$0")/../../.." || exit 1
mkdir -p "$out"
bash launch/cluster.sh down >/dev/null 2>&1
s=$(date +%s.%N)
bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$rate" >"$out/up.log" 2>&1 || { tail -3 "$out/up.log"; exit 1; }
if [ "$slow" != - ]; then
  IFS=: read -r sn snic srate <<<"$slow"
  bash launch/cluster.sh shape "$sn" "$snic" "$srate" >>"$out/up.log" 2>&1 || { tail -2 "$out/up.log"; exit 1; }
fi
echo "rig ${nodes}x${ranks}x${nics} at $rate (slow: $slow) up in $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
ok=0
for i in $(seq "$count"); do
  s=$(date +%s.%N)
  timeout -k 10 "$limit" bash launch/cluster.sh run -np $((nodes * ranks)) -- "$@" --out "$out/run$i" >"$out/log$i" 2>&1
  rc=$?
  [ $rc = 0 ] && ok=$((ok + 1))
  w=$(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
  python3 - "$out/run$i/summary.json" "$i" "$rc" "$w" <<'PY'
import json, sys
path, i, rc, wall = sys.argv[1:]
try: s = json.load(open(path))
except Exception as e: print(f"run {i}: exit {rc} in {wall} s; no summary ({e})"); sys.exit()
st = (s.get("placement") or {}).get("setup") or {}
bad = [f"{v['host']} {v['verdict']}: {v['evidence']}" for v in s.get("node_verdicts") or [] if v["verdict"] != "healthy"]
slow = [f.get("finding") or f for f in s.get("slow_nics") or []]
res = s.get("results") or []
top = res[-1] if res else {}
fail = s.get("failure") or {}
print(f"run {i}: exit {rc} in {wall} s; status {s.get('status')}; first timed byte {st.get('first_timed_s')}; setup {st.get('seconds')} s; "
      f"peak {max(st.get('threads_peak') or [0])} threads {max(st.get('fds_peak') or [0])} fds; busbw@{top.get('size_bytes')} {round(top.get('busbw_gbps', 0), 3)}; "
      f"{len(s.get('node_verdicts') or [])} verdicts, not healthy: {bad or 'none'}; wrong {s.get('wrong_total')}"
      + (f"; error {str(s.get('error'))[:200]}; culprit {json.dumps(fail.get('culprit'))[:300]}" if rc != "0" else ""))
PY
  grep -E "is slow (sending|receiving)|^# Node verdicts|^#  *node[0-9]+ +(bad|suspect)" "$out/log$i" | head -4 | awk '{ print "   " length($0) " chars: " substr($0, 1, 260) }'
done
echo "== $ok of $count runs exit 0"
bash launch/cluster.sh down >/dev/null 2>&1
