#!/usr/bin/env bash
# Quick start on a fresh machine: install what the run needs, build tcpx-perf and the plugins (not
# tcpx-analyze: `launch/build.sh --all`), and run the headline job on tcpx-emu with four ranks on
# this host (host memory when there is no GPU):
#   mpirun -np 4 tcpx-perf --pattern fullmesh
# Extra arguments go to tcpx-perf, e.g. `launch/quickstart.sh -b 1M -e 256M`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
bash launch/build.sh
source launch/mpirun-args.sh
# tcpx-perf's own default sizes (1M to 64M); the caller's flags follow (a flag given twice is refused).
set -x
mpirun "${MPIRUN_ARGS[@]}" -np 4 target/release/tcpx-perf --pattern fullmesh "$@"
