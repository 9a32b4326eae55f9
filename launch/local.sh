#!/usr/bin/env bash
# Runs tcpx-perf with N ranks on this host over tcpx-emu (loopback):
#   launch/local.sh 4 --pattern ring -b 1M -e 1G
# Tuning knobs of tcpx-emu (the same names TCPX reads) can be set in the environment:
#   NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=1 NCCL_DYNAMIC_CHUNK_SIZE=524288
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: launch/local.sh NP [tcpx-perf args...]}; shift
source launch/mpirun-args.sh
export_args=()
for v in $(env | grep -oE '^(NCCL|TCPXEMU)_[A-Z0-9_]+' || true); do export_args+=(-x "$v"); done
exec mpirun "${MPIRUN_ARGS[@]}" "${export_args[@]}" -np "$np" target/release/tcpx-perf "$@"
