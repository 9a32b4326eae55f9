#!/usr/bin/env bash
# NCCL's Socket transport over lo, measured in the same call as tcpx-perf (issue 4's baseline):
# sendrecv and alltoall, nccl-tests' timing (back to back) and tcpx-perf's (barrier, one op),
# through PyTorch's NCCL backend (tools/nccl_socket_bench.py). Writes nccl-tests JSON (v3) per
# pattern and timing into OUT_DIR for `tcpx-analyze compare -B`.
# Usage on the GPU host: OUT_DIR=results/nccl-socket tools/nccl-socket-bench.sh [NGPUS]
# Env: PATTERNS (sendrecv alltoall), TIMINGS (batch barrier), SIZES_ARGS (-b 1M -e 1G -f 2 -n 20 -w 5);
#      NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD (default 4 / 4: NCCL's tuned socket figures).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ngpus=${1:-4}
OUT_DIR=${OUT_DIR:-results/nccl-socket}
mkdir -p "$OUT_DIR" || { echo "nccl-socket-bench: cannot create $OUT_DIR" >&2; exit 1; }
export NCCL_NET=Socket NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-4} NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-4}
unset NCCL_NET_PLUGIN
rc=0
for pattern in ${PATTERNS:-sendrecv alltoall}; do
  for timing in ${TIMINGS:-batch barrier}; do
    json="$OUT_DIR/nccl-socket-${pattern}-${timing}.json"
    # shellcheck disable=SC2086 # SIZES_ARGS is a list of arguments
    timeout --kill-after=10 "${BENCH_TIMEOUT:-300}" python3 -m torch.distributed.run --standalone \
      --nproc_per_node "$ngpus" "$here/nccl_socket_bench.py" --pattern "$pattern" --timing "$timing" \
      ${SIZES_ARGS:--b 1M -e 1G -f 2 -n 20 -w 5} --json "$json" 2>&1 | grep -v -E '^(W|I)[0-9]{4} |^\*+$|OMP_NUM_THREADS'
    r=${PIPESTATUS[0]}
    [ "$r" -eq 0 ] || { echo "nccl-socket-bench: $pattern/$timing failed (exit $r)"; rc=1; }
  done
done
exit $rc
