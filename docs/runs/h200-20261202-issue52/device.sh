#!/usr/bin/env bash
# Issue 52 on the GPU host (one call, under 10 minutes), and issue 51's 64-node run once more on
# the final build:
#   1. UNEVEN (16 x 6 x 4: GPUs 0,1 on eth1, 2 on eth2, 3,4 on eth3, 5 on eth4) at 1gbit, issue
#      41's flags with -e 4M: SLOWED runs (5) with one NIC of a random node at a quarter (seed
#      printed per run: the node and NIC it chose) and HEALTHY runs (3): the slowed NIC named,
#      nobody else; healthy runs all healthy;
#   2. 16 x 8 x 4 at 1gbit, -e 8M, 2 runs with a random quarter-rate NIC: named;
#   3. 64 x 8 x 4 at 500mbit, -b 1M -e 2M -n 3 -w 1, once: exit 0, and how many console lines
#      another line cut (issue 51's whole lines, after the plugin's lines went whole).
# Carried (.devcarry, not in git): new/ (tcpx-perf and its v7 plugin), iproute2/. Output:
# $OUT/lines.txt and $OUT/issue52.tgz (rewritten after every run: a call cut short keeps the
# runs before it).
set -u
cd "$(dirname "$0")/../../.." || exit 1
here=docs/runs/h200-20261202-issue52
fig=docs/runs/h200-20261201-issue51
OUT=${OUT:-/tmp/out}; W=/tmp/issue52; mkdir -p "$OUT" "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
export CLUSTER_GPUS_PER_NODE=0 TCPX_PERF=${TCPX_PERF:-$PWD/.devcarry/new/tcpx-perf}
if [ -d .devcarry/iproute2 ] && ! command -v tc >/dev/null; then
  # shellcheck source=tools/iproute2-wrap.sh
  source tools/iproute2-wrap.sh
  iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
fi
say() { echo "$*" | tee -a "$OUT/lines.txt"; }
pack() { tar czf "$OUT/issue52.tgz" --exclude='*/pairs.csv' --exclude='*/rank_samples.csv' -C "$W" . 2>/dev/null; }
say "== $(hostname): $(nproc) cores, $(date -u +%FT%TZ)"
rig() { # SHAPE RATE
  local nodes ranks nics
  IFS=x read -r nodes ranks nics <<<"$1"
  bash launch/cluster.sh down >/dev/null 2>&1
  bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$2" >"$W/up-$1.log" 2>&1 || { tail -3 "$W/up-$1.log"; exit 1; }
}
# run NAME SHAPE LIMIT SLOW(node:nic|-) [flags]: one run; its verdicts against the slowed NIC.
run() {
  local name=$1 shape=$2 limit=$3 slow=$4 nodes ranks nics s rc
  shift 4
  IFS=x read -r nodes ranks nics <<<"$shape"
  s=$(date +%s.%N)
  # ARGS is a flag list: split on purpose.
  # shellcheck disable=SC2086
  TCPX_PERF_TRACE=1 timeout -k 5 "$limit" bash launch/cluster.sh run -np $((nodes * ranks)) -- $ARGS "$@" --out "$W/$name" >"$W/$name.log" 2>&1
  rc=$?
  say "$name ($shape, slowed $slow): exit $rc, $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s; $(python3 "$here/judge.py" "$W/$name/summary.json" "$slow")"
  pkill -9 -x tcpx-perf 2>/dev/null
  sleep 1
  pack
}
# A random node and NIC from SEED, shaped to a quarter of RATE; "-" for a healthy run.
slow_one() { # SHAPE SEED QUARTER
  local nodes nics node nic
  IFS=x read -r nodes _ nics <<<"$1"
  node=$(($2 % nodes)) nic=$(($2 / nodes % nics + 1))
  bash launch/cluster.sh shape "node$node" "eth$nic" "$3" >>"$W/shape.log" 2>&1
  echo "node$node:eth$nic"
}
unshape() { # SLOW
  [ "$1" = - ] && return
  bash launch/cluster.sh shape "${1%%:*}" "${1##*:}" off >>"$W/shape.log" 2>&1
}
UNEVEN=${UNEVEN:-16x6x4}
rig "$UNEVEN" 1gbit
ARGS="--pattern fullmesh -b 1M -e 4M -n 10 -w 2 -T 120 --mem host"
for i in $(seq 1 "${SLOWED:-5}"); do
  seed=$RANDOM
  slow=$(slow_one "$UNEVEN" "$seed" 250mbit)
  say "seed $seed"
  run "uneven-slow-$i" "$UNEVEN" "${LIMIT:-90}" "$slow"
  unshape "$slow"
done
for i in $(seq 1 "${HEALTHY:-3}"); do
  run "uneven-healthy-$i" "$UNEVEN" "${LIMIT:-90}" -
done
EVEN=${EVEN:-16x8x4}
rig "$EVEN" 1gbit
ARGS="--pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host"
for i in $(seq 1 "${EVEN_RUNS:-2}"); do
  seed=$RANDOM
  slow=$(slow_one "$EVEN" "$seed" 250mbit)
  say "seed $seed"
  run "even-slow-$i" "$EVEN" "${LIMIT:-90}" "$slow"
  unshape "$slow"
done
if [ "${BIG:-64x8x4}" != none ]; then
  rig "${BIG:-64x8x4}" 500mbit
  ARGS="--pattern fullmesh -b 1M -e 2M -n 3 -w 1 -T 120 --mem host"
  run big "${BIG:-64x8x4}" 140 -
  say "big: $(python3 "$fig/figures.py" "$W/big.log" /dev/null)"
fi
bash launch/cluster.sh down >/dev/null 2>&1
say "== done $(date -u +%FT%TZ)"
pack
