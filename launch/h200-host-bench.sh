#!/usr/bin/env bash
# Issue-3 performance run on the 4 x H200 test host (host memory, tcpx-emu over lo):
# sendrecv and fullmesh, 4 ranks, 1 MiB .. 1 GiB, data check on, result directories kept.
# Usage (on the GPU host, binaries carried in BIN_DIR):
#   BIN_DIR=.device/bin OUT_DIR=$OUT launch/h200-host-bench.sh
set -uo pipefail
BIN_DIR=${BIN_DIR:-target/release}
OUT_DIR=${OUT_DIR:-results}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
export NCCL_NVLS_ENABLE=0
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4)
# tcpx-emu tuned: 8 data sockets per comm (TCPX's maximum), 1 MiB chunks.
TUNE=(-x NCCL_NSOCKS_PERTHREAD=${NSOCKS:-8} -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=${DCHUNK:-1048576})
ARGS=(-b 1M -e 1G -f 2 -n ${ITERS:-20} -w ${WARMUP:-5} --chunk ${CHUNK:-4M} --window ${WINDOW:-8} --channels ${CHANNELS:-2} --progress never)
echo "# host: $(hostname) cores: $(nproc) $(mpirun --version | head -1)"
rc=0
for pattern in ${PATTERNS:-sendrecv fullmesh}; do
  dir="$OUT_DIR/h200-${STAMP}-${pattern}"
  echo "# command: NCCL_NSOCKS_PERTHREAD=${NSOCKS:-8} NCCL_DYNAMIC_CHUNK_SIZE=${DCHUNK:-1048576} mpirun -np 4 tcpx-perf --pattern $pattern ${ARGS[*]}"
  "${MPI[@]}" "${TUNE[@]}" "$BIN_DIR/tcpx-perf" --pattern "$pattern" "${ARGS[@]}" --out "$dir" 2>&1 \
    | grep -v '^#  Rank' || rc=1
done
exit $rc
