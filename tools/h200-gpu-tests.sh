#!/usr/bin/env bash
# GPU checks and benchmarks on the 4 x H200 test host (issue 4), one call:
#  1. kernels: fill/verify/unpack against the CPU reference, and the unpack benchmark
#     (gather of scrambled 4 KiB fragments vs cuMemcpyDtoD of the same bytes);
#  2. every pattern with --mem cuda -c 1 through tcpx-emu in unpack mode: 2 and 4 GPUs with one
#     rank per GPU, and one rank driving all GPUs (-g); each must exit 0 with #wrong == 0;
#  3. baseline: NCCL's own Socket transport, sendrecv and alltoall, 4 GPUs, in the same call
#     (tools/nccl-socket-bench.sh): machines of the test host differ by tens of percent from one
#     loan to the next, so the figures that matter are ratios measured on one machine;
#  4. sendrecv and fullmesh, 4 GPUs: a tuning pass with --mem cuda (tools/sweep.sh), then
#     1 MiB .. 1 GiB with the best knobs, --mem cuda and --mem host in the same call (result
#     directories under $OUT_DIR), each compared with section 3 per size (tcpx-analyze compare).
# Usage on the GPU host, binaries carried in BIN_DIR (tcpx-perf, libnccl_net_tcpxemu.so, gpu_check,
# tcpx-analyze):
#   BIN_DIR=.device/bin OUT_DIR=$OUT/results tools/h200-gpu-tests.sh
set -uo pipefail
. "$(dirname "$0")/variant.sh"
BIN_DIR=${BIN_DIR:-target/release}
OUT_DIR=${OUT_DIR:-results}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
export NCCL_NVLS_ENABLE=0
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
TUNE=(-x NCCL_NSOCKS_PERTHREAD=8 -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=1048576)
fail=0
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l); $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"

SECTIONS=${SECTIONS:-kernels correctness baseline performance}
on() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }

if on kernels && [ -x "$BIN_DIR/gpu_check" ]; then
  echo "## kernels"
  "$BIN_DIR/gpu_check" 2>&1 | grep -E '^\[|RESULT|unpack benchmark|request|K +[0-9]|driver|NVRTC' || fail=1
fi

on correctness && echo "## correctness: every pattern, --mem cuda -c 1, tcpx-emu unpack mode"
on correctness && for shape in "2 1" "4 1" "1 2" "1 4"; do
  set -- $shape; np=$1; g=$2
  for pattern in sendrecv pairs ring fullmesh; do
    out=$("${MPI[@]}" -np "$np" "${TUNE[@]}" "$BIN_DIR/tcpx-perf" --pattern "$pattern" -g "$g" --mem cuda \
          -b 1M -e 64M -f 8 -n 5 -w 1 --chunk 4M --window 8 -T 60 --no-out --progress never 2>&1)
    rc=$?
    wrong=$(echo "$out" | awk '/Out of bounds values/ {print $7}')
    path=$(echo "$out" | grep -m1 '^# memory:' | cut -c1-60)
    printf '%-9s np=%d -g %d: exit %d, wrong %s  %s\n' "$pattern" "$np" "$g" "$rc" "${wrong:-?}" "$path"
    if [ "$rc" -ne 0 ] || [ "${wrong:-x}" != 0 ]; then fail=1; echo "$out" | tail -15; fi
  done
done

# The staged path: tcpx-emu in host mode takes host memory only, so tcpx-perf stages CUDA buffers
# through pinned host memory itself; the header must say so.
on correctness && echo "## correctness: --mem cuda through a host-only plugin (TCPXEMU_MODE=host): pinned staging"
on correctness && for pattern in sendrecv ring fullmesh; do
  out=$("${MPI[@]}" -np 4 "${TUNE[@]}" -x TCPXEMU_MODE=host "$BIN_DIR/tcpx-perf" --pattern "$pattern" --mem cuda \
        -b 1M -e 64M -f 8 -n 5 -w 1 --chunk 4M --window 8 -T 60 --no-out --progress never 2>&1)
  rc=$?
  wrong=$(echo "$out" | awk '/Out of bounds values/ {print $7}')
  staged=$(echo "$out" | grep -c '^# memory: cuda (CUDA memory staged')
  printf '%-9s np=4 staged: exit %d, wrong %s, header says staged: %s\n' "$pattern" "$rc" "${wrong:-?}" "$staged"
  if [ "$rc" -ne 0 ] || [ "${wrong:-x}" != 0 ] || [ "$staged" != 1 ]; then fail=1; echo "$out" | tail -15; fi
done

NCCL_DIR="$OUT_DIR/h200-${STAMP}-nccl-socket"
if on baseline; then
  echo "## baseline: NCCL Socket transport over lo, same call (tools/nccl-socket-bench.sh)"
  # NCCL's names for this script's patterns (PATTERNS means tcpx-perf's here, NCCL's there).
  nccl_patterns=$(for p in ${PATTERNS:-sendrecv fullmesh}; do [ "$p" = fullmesh ] && echo alltoall || echo "$p"; done)
  PATTERNS="$nccl_patterns" OUT_DIR=$NCCL_DIR bash "$(dirname "$0")/nccl-socket-bench.sh" 4 | grep -v '^$' || fail=1
fi

# One line per comparison: tcpx-perf result directory $1 against NCCL's JSON $2 on metric $3,
# the ratio of medians per size (tcpx-analyze compare; bootstrap CIs in its full output).
ratios() {
  "$BIN_DIR/tcpx-analyze" compare "$1" -B "$2" --metric "$3" 2>&1 |
    awk -F'|' '/^\| [a-z]+ \| [0-9]+ [KMG]iB \|/ {r = $8; sub(/ \(.*/, "", r); gsub(/ /, "", $3); gsub(/ /, "", r); printf " %s %s", $3, r}'
}

# Performance: a tuning pass (tools/sweep.sh at TUNE_SIZES, data check on) over data sockets per
# comm, socket chunk size, socket buffers, comms per peer and request size; the variant whose
# slowest size is fastest runs the full sweep, --mem cuda and --mem host in the same call with the
# same knobs. Per-chunk costs (staging copies and their events) favour chunks of 1-4 MiB; small
# socket buffers keep the staging and socket memory in the last-level cache.
TUNE_SIZES=${TUNE_SIZES:-64M 256M 1G}
declare -A VARIANTS=(
  [sendrecv]="${SENDRECV_VARIANTS:-nsocks=4,ch=2,cs=4194304,buf=524288 nsocks=4,ch=2,cs=2097152,buf=524288 nsocks=8,ch=1,cs=2097152,buf=524288 nsocks=8,ch=1,cs=1048576,buf=524288 nsocks=4,ch=2,cs=2097152,buf=262144}"
  [fullmesh]="${FULLMESH_VARIANTS:-nsocks=2,ch=2,cs=2097152,buf=262144,win=16 nsocks=2,ch=2,cs=2097152,buf=1048576,win=16 nsocks=1,ch=4,cs=2097152,buf=262144,win=16 nsocks=2,ch=2,cs=1048576,buf=1048576,win=16 nsocks=2,ch=2,cs=2097152,buf=262144,win=8 nsocks=2,ch=2,cs=1048576,buf=262144,win=16}"
)
on performance && for pattern in ${PATTERNS:-sendrecv fullmesh}; do
  echo "## tuning: $pattern, --mem cuda"
  table=$(BIN_DIR=$BIN_DIR PATTERN=$pattern MEM=cuda SIZES="$TUNE_SIZES" ITERS=8 WARMUP=2 \
          bash "$(dirname "$0")/sweep.sh" ${VARIANTS[$pattern]})
  echo "$table"
  best=$(echo "$table" | awk '!/^#/ {s=1e9; for (i=3; i<=NF; i+=2) {split($i, a, "/"); if (a[1]+0 < s) s=a[1]+0} if (s>m) {m=s; b=$1}} END {print b}')
  [ -n "$best" ] || { echo "# tuning $pattern failed"; fail=1; continue; }
  variant_parse "$best" || { fail=1; continue; }
  echo "## performance: $pattern, 4 GPUs, 1 MiB .. 1 GiB, CUDA vs host memory, $best"
  for mem in cuda host; do
    dir="$OUT_DIR/h200-${STAMP}-${pattern}-${mem}"
    echo "# command: $variant_mpirun -np 4 tcpx-perf --pattern $pattern --mem $mem -b 1M -e 1G -f 2 -n 20 -w 5 ${variant_args[*]}"
    mpirun --allow-run-as-root --oversubscribe "${variant_binding[@]}" -np 4 "${variant_env[@]}" \
      "$BIN_DIR/tcpx-perf" --pattern "$pattern" --mem "$mem" -b 1M -e 1G -f 2 -n 20 -w 5 \
      "${variant_args[@]}" -T 120 --progress never --out "$dir" 2>&1 \
      | grep -E '^ +[0-9]|^# memory|Out of bounds|Avg bus|error|timeout' || fail=1
  done
  if [ ! -x "$BIN_DIR/tcpx-analyze" ]; then
    echo "# no $BIN_DIR/tcpx-analyze: the ratios to NCCL are left out (launch/build.sh --all builds it)"
    continue
  fi
  [ -d "$NCCL_DIR" ] || continue
  case $pattern in sendrecv) coll=sendrecv metric=busbw ;; *) coll=alltoall metric=algbw ;; esac
  for mem in cuda host; do
    for timing in batch barrier; do
      echo "# ratio $pattern --mem $mem / NCCL $coll ($timing timing), $metric per size:$(ratios \
        "$OUT_DIR/h200-${STAMP}-${pattern}-${mem}" "$NCCL_DIR/nccl-socket-${coll}-${timing}.json" "$metric")"
    done
  done
done
echo "gpu tests: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
