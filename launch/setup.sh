#!/usr/bin/env bash
# Installs what building and running tcpx-perf needs on a fresh Debian/Ubuntu machine:
# Open MPI (mpirun and headers for rsmpi), libclang (rsmpi's bindgen), pkg-config, and Rust if
# it is missing. Safe to run again.
set -euo pipefail
need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
dpkg -s libopenmpi-dev >/dev/null 2>&1 || need+=(libopenmpi-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" ca-certificates curl >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
echo "setup: $(mpirun --version 2>/dev/null | head -1); $(cargo --version)"
