#!/usr/bin/env bash
# Issue-3 performance run on the 4 x H200 test host (host memory, tcpx-emu over lo), one call.
# For each pattern:
#  1. a short tuning pass at 256 MiB with the data check off over data sockets per comm
#     (NCCL_NSOCKS_PERTHREAD), comms per peer (--channels), request size (--chunk) and process
#     binding; every variant's figure is printed;
#  2. the full sweep with the best variant, data check on, 4 ranks, 1 MiB .. 1 GiB, result
#     directory under $OUT_DIR.
# Usage on the GPU host, binaries carried in BIN_DIR:
#   BIN_DIR=.device/bin OUT_DIR=$OUT/results tools/h200-host-bench.sh
set -uo pipefail
BIN_DIR=${BIN_DIR:-target/release}
OUT_DIR=${OUT_DIR:-results}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
export NCCL_NVLS_ENABLE=0
echo "# host: $(hostname) cores: $(nproc) numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l) $(mpirun --version | head -1)"
echo "# THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"

# variant = "nsocks channels chunk binding"
declare -A VARIANTS=(
  [sendrecv]="8_2_4M_none 8_4_4M_none 8_2_16M_none 8_2_4M_numa 4_4_4M_none"
  [fullmesh]="2_1_4M_none 4_1_4M_none 8_1_4M_none 4_2_4M_none 4_1_16M_none 4_1_4M_numa"
  [ring]="8_2_4M_none 4_2_4M_none 8_1_4M_none"
)

mpi() { # binding, then the rest
  local bind=$1; shift
  if [ "$bind" = numa ]; then set -- --map-by numa --bind-to numa "$@"; else set -- --bind-to none "$@"; fi
  mpirun --allow-run-as-root --oversubscribe -np 4 "$@"
}

rc=0
for pattern in ${PATTERNS:-sendrecv fullmesh ring}; do
  best_bw=0; best=""
  for v in ${VARIANTS[$pattern]}; do
    IFS=_ read -r nsocks channels chunk bind <<<"$v"
    bw=$(mpi "$bind" -x NCCL_NSOCKS_PERTHREAD=$nsocks -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=1048576 \
          "$BIN_DIR/tcpx-perf" --pattern "$pattern" -b 256M -e 256M -n 8 -w 2 -c 0 --chunk "$chunk" --window 8 \
          --channels "$channels" --no-out --progress never 2>/dev/null | awk '/^ +[0-9]/ {print $8}')
    echo "# tune $pattern: NCCL_NSOCKS_PERTHREAD=$nsocks --channels $channels --chunk $chunk bind=$bind -> 256M busbw ${bw:-failed} GB/s"
    if [ -n "$bw" ] && awk -v a="$bw" -v b="$best_bw" 'BEGIN{exit !(a>b)}'; then best_bw=$bw; best=$v; fi
  done
  [ -n "$best" ] || { echo "# tuning $pattern failed"; rc=1; continue; }
  IFS=_ read -r nsocks channels chunk bind <<<"$best"
  args=(-b 1M -e 1G -f 2 -n ${ITERS:-20} -w ${WARMUP:-5} --chunk "$chunk" --window 8 --channels "$channels" --progress never)
  dir="$OUT_DIR/h200-${STAMP}-${pattern}"
  echo "# command: NCCL_NSOCKS_PERTHREAD=$nsocks NCCL_SOCKET_NTHREADS=1 NCCL_DYNAMIC_CHUNK_SIZE=1048576 mpirun -np 4 $([ "$bind" = numa ] && echo '--map-by numa --bind-to numa ')tcpx-perf --pattern $pattern ${args[*]}"
  mpi "$bind" -x NCCL_NSOCKS_PERTHREAD=$nsocks -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=1048576 \
    "$BIN_DIR/tcpx-perf" --pattern "$pattern" "${args[@]}" --out "$dir" 2>&1 | grep -v '^#  Rank\|^# plugin sha' || rc=1
done
exit $rc
