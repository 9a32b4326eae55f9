#!/usr/bin/env bash
# tcpx-perf on two GCP A3-high nodes over GPUDirect-TCPX (one rank per GPU, 16 ranks):
#   launch/a3-high.sh --pattern fullmesh -b 1M -e 1G
# The environment is the one NCCL's TCPX baseline ran with (seed documents, 19.2 GB/s busbw):
# data NICs eth1..eth4, control on eth0, RxDM sockets in /run/tcpx, helper threads bound per NUMA node.
# tcpx-perf picks each GPU's NIC by PCIe topology and pins its threads (--cpu-bind auto); check first with
#   launch/a3-high.sh --dry-run
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:-hostfiles/tcpx.txt}
TCPX_LIB=${TCPX_LIB:-/usr/local/tcpx/lib64}
PLUGIN=${PLUGIN:-$TCPX_LIB/libnccl-net-tcpx.so}
RANKS=${RANKS:-16}
mpirun --allow-run-as-root -np "$RANKS" -hostfile "$HOSTFILE" --map-by ppr:8:node \
  --mca btl tcp,self --mca btl_tcp_if_include eth0 \
  -x PATH -x LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/nvidia/lib64:$TCPX_LIB:${LD_LIBRARY_PATH:-}" \
  -x CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \
  -x NCCL_NSOCKS_PERTHREAD=4 -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE=524288 \
  -x NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4 -x NCCL_GPUDIRECTTCPX_CTRL_DEV=eth0 \
  -x NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx \
  -x NCCL_GPUDIRECTTCPX_TX_BINDINGS="eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177" \
  -x NCCL_GPUDIRECTTCPX_RX_BINDINGS="eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191" \
  -x NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS=50000 \
  -x NCCL_GPUDIRECTTCPX_FORCE_ACK=0 -x NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP=1000 \
  target/release/tcpx-perf --plugin "$PLUGIN" --window 16 --chunk 512K "$@"
