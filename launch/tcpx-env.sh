# shellcheck shell=bash disable=SC2034 # sourced: the caller uses what it sets
# The one source of GPUDirect-TCPX's environment for tcpx-perf on A3-high (sourced, not run):
# launch/a3-high.sh (mpirun), the Slurm script and the Kubernetes manifests all take it from here.
# It is the environment NCCL's TCPX baseline ran with (seed documents, 19.2 GB/s busbw): data
# NICs eth1..eth4, control on eth0, RxDM sockets in /run/tcpx, helper threads bound per NUMA node.
#
# Sets, honouring what the caller already set:
#   TCPX_LIB    where the plugin and its libraries are (default /usr/local/tcpx/lib64)
#   PLUGIN      the plugin tcpx-perf loads (default $TCPX_LIB/libnccl-net-tcpx.so; a path to
#               tcpx-emu's libnccl-net-tcpxemu-v7.so rehearses the same job without TCPX)
#   TCPX_LD_LIBRARY_PATH  the library path the ranks need
#   TCPX_ENV    NAME=VALUE pairs every rank gets (CUDA_VISIBLE_DEVICES and the NCCL_* variables)
#   TCPX_PERF_ARGS  the tcpx-perf flags that go with them (--plugin, --window, --chunk)
TCPX_LIB=${TCPX_LIB:-/usr/local/tcpx/lib64}
PLUGIN=${PLUGIN:-$TCPX_LIB/libnccl-net-tcpx.so}
TCPX_LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/nvidia/lib64:$TCPX_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck disable=SC2054 # the commas belong to the values (device lists)
TCPX_ENV=(
  CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
  NCCL_NSOCKS_PERTHREAD=4
  NCCL_SOCKET_NTHREADS=1
  NCCL_DYNAMIC_CHUNK_SIZE=524288
  NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=eth1,eth2,eth3,eth4
  NCCL_GPUDIRECTTCPX_CTRL_DEV=eth0
  NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx
  "NCCL_GPUDIRECTTCPX_TX_BINDINGS=eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"
  "NCCL_GPUDIRECTTCPX_RX_BINDINGS=eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191"
  NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS=50000
  NCCL_GPUDIRECTTCPX_FORCE_ACK=0
  NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP=1000
)
TCPX_PERF_ARGS=(--plugin "$PLUGIN" --window 16 --chunk 512K)
