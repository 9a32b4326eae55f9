#!/usr/bin/env bash
# tcpx-perf on two GCP A3-high nodes over GPUDirect-TCPX (one rank per GPU, 16 ranks):
#   launch/a3-high.sh --pattern fullmesh -b 1M -e 1G
# TCPX's environment comes from launch/tcpx-env.sh (the one copy, shared with Slurm and GKE).
# tcpx-perf picks each GPU's NIC by PCIe topology and pins its threads (--cpu-bind auto); check first with
#   launch/a3-high.sh --dry-run
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:-hostfiles/tcpx.txt}
RANKS=${RANKS:-16}
# Open MPI answers a hostfile that names no node with "No nodes are available for this job":
# say which file to fill, and how, before it is asked (exit 64, the project's usage status).
if [ ! -r "$HOSTFILE" ] || ! grep -qv '^[[:space:]]*\(#\|$\)' "$HOSTFILE"; then
  what="names no node"
  [ -r "$HOSTFILE" ] || what="cannot be read"
  echo "a3-high: $HOSTFILE $what: add a line 'HOST slots=8' for each of your nodes (its eth0 address or host name; the commented examples show the form), or set HOSTFILE=FILE" >&2
  exit 64
fi
# shellcheck source=launch/tcpx-env.sh
source launch/tcpx-env.sh
exports=(-x PATH -x LD_LIBRARY_PATH="$TCPX_LD_LIBRARY_PATH")
for kv in "${TCPX_ENV[@]}"; do exports+=(-x "$kv"); done
mpirun --allow-run-as-root -np "$RANKS" -hostfile "$HOSTFILE" --map-by ppr:8:node \
  --mca btl tcp,self --mca btl_tcp_if_include eth0 \
  "${exports[@]}" \
  target/release/tcpx-perf "${TCPX_PERF_ARGS[@]}" "$@"
