#!/usr/bin/env bash
# Issue 33 on the 4 x H100 host: BIN= a build's stripped binaries (.devcarry/base: main at 9615305),
# Debian 12's iproute2 in .devcarry/iproute2. RUNS: "name:NODESxRANKSxNICS:RATE:extra,args" each;
# every run is packed into $OUT/NAME.tgz as soon as it ends (the device tool returns few files).
set -u
cd "$(dirname "$0")/../../.." || exit 1
OUT=${OUT:-/tmp/out}; WORK=${WORK:-/tmp/work}; mkdir -p "$OUT" "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 CLUSTER_RIG=${CLUSTER_RIG:-1}
BIN=${BIN:-$PWD/.devcarry/base}
# shellcheck source=tools/iproute2-wrap.sh
source tools/iproute2-wrap.sh
iproute2_wrap "$PWD/.devcarry/iproute2" /tmp/iprbin || exit 1
export TCPX_PERF=$BIN/tcpx-perf
{ date -u; nproc; uname -r; nvidia-smi -L; for k in kernel/pid_max net/core/somaxconn net/core/netdev_max_backlog net/ipv4/tcp_max_syn_backlog net/ipv4/tcp_keepalive_time net/ipv4/tcp_synack_retries net/ipv4/neigh/default/gc_thresh3 net/ipv4/neigh/default/base_reachable_time_ms; do echo "$k $(cat /proc/sys/$k)"; done; ulimit -n; } >"$OUT/env.txt" 2>&1
for spec in ${RUNS:?}; do
  IFS=: read -r name shape rate extra <<<"$spec"
  IFS=x read -r nodes ranks nics <<<"$shape"
  echo "== $name ($shape at $rate, ${extra//,/ })"
  # shellcheck disable=SC2086
  bash docs/runs/h100x4-20261127-issue33/diag-run.sh "$WORK/$name" "$nodes" "$ranks" "$nics" "$rate" -- \
    --pattern fullmesh -b 1M -e 8M -n 10 -w 2 -T 120 --mem host ${extra//,/ }
  find "$WORK/$name" \( -name 'rank_samples.csv' -o -name 'samples.csv' -o -name '*.svg' \) -delete
  tar czf "$OUT/$name.tgz" -C "$WORK" "$name"
  cp "$OUT/summary.txt" "$WORK/" 2>/dev/null
done 2>&1 | tee "$OUT/summary.txt"
