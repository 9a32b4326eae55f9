#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs the whole test suite (what CI runs):
# unit tests, plugin tests over real sockets, and MPI runs of every pattern on tcpx-emu.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
bash launch/build.sh
# Open MPI refuses root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two cores run up to 4 ranks plus test threads: one test binary at a time, two tests at once.
cargo test --release --workspace -- --test-threads=2
