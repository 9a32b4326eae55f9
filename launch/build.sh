#!/usr/bin/env bash
# Builds the workspace in release mode and gives the plugin NCCL's file name as well, so that
# NCCL itself finds it with NCCL_NET_PLUGIN=tcpxemu (libnccl-net-tcpxemu.so).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace "$@"
ln -sf libnccl_net_tcpxemu.so target/release/libnccl-net-tcpxemu.so
ln -sf libnccl_net_tcpxemu_v7.so target/release/libnccl-net-tcpxemu-v7.so
echo "built: target/release/tcpx-perf, target/release/tcpx-analyze, target/release/libnccl-net-tcpxemu.so, target/release/libnccl-net-tcpxemu-v7.so (only ncclNetPlugin_v7, as TCPX)"
