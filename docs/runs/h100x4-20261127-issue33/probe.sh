#!/usr/bin/env bash
# One rig, several short runs on it, each timed from launch: where the setup time of a 128-rank
# job goes. Usage: probe.sh OUTDIR NODES RANKS NICS RATE "args;args;..." (BIN, IP/TC as device.sh).
set -u
out=$1 nodes=$2 ranks=$3 nics=$4 rate=$5 runs=$6
cd "$(dirname "$0")/../../.." || exit 1
mkdir -p "$out"
bash launch/cluster.sh down >/dev/null 2>&1
t0=$(date +%s.%N)
bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$rate" >"$out/up.log" 2>&1 || { tail -3 "$out/up.log"; exit 1; }
echo "rig up in $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
i=0
IFS=';' read -r -a list <<<"$runs"
for args in "${list[@]}"; do
  i=$((i + 1))
  s=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout -k 5 ${RUN_TIMEOUT:-150} bash launch/cluster.sh run -np $((nodes * ranks)) -- $args --out "$out/run$i" >"$out/log$i" 2>&1
  rc=$?
  echo "== run $i ($args): exit $rc in $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
  grep -E "^# setup|^tcpx-perf: (error|rank)" "$out/log$i" | head -3 | cut -c1-500
  python3 - "$out/run$i/summary.json" <<'PY'
import json, sys
try: s = json.load(open(sys.argv[1]))
except Exception as e: print(f"   no summary: {e}"); sys.exit()
st = (s.get("placement") or {}).get("setup") or {}
print(f"   status {s.get('status')}; first_timed_s {st.get('first_timed_s')}; rounds " + ", ".join(f"{r['round']}:{r['seconds_max']:.2f}s" for r in st.get("rounds", [])))
PY
done
bash launch/cluster.sh down >/dev/null 2>&1
