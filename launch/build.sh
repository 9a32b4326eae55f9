#!/usr/bin/env bash
# Builds tcpx-perf and the tcpx-emu plugins in release mode, and gives each plugin NCCL's file name
# as well, so that NCCL itself finds it with NCCL_NET_PLUGIN=tcpxemu (libnccl-net-tcpxemu.so).
#   bash launch/build.sh          tcpx-perf and the plugins: what a run needs
#   bash launch/build.sh --all    the whole workspace, tcpx-analyze too (bundled SQLite, nalgebra:
#                                 the larger part of a first build; launch/test.sh builds it)
# Other arguments go to cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(-p tcpx-perf -p tcpx-emu -p tcpx-emu-v7)
built="target/release/tcpx-perf"
if [ "${1:-}" = --all ]; then
  shift
  crates=(--workspace)
  built="$built, target/release/tcpx-analyze"
fi
cargo build --release "${crates[@]}" "$@"
ln -sf libnccl_net_tcpxemu.so target/release/libnccl-net-tcpxemu.so
ln -sf libnccl_net_tcpxemu_v7.so target/release/libnccl-net-tcpxemu-v7.so
echo "built: $built, target/release/libnccl-net-tcpxemu.so, target/release/libnccl-net-tcpxemu-v7.so (only ncclNetPlugin_v7, as TCPX)"
