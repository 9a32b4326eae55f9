#!/usr/bin/env bash
# Same-call A/B of --poll spin vs adaptive on the GPU path (CUDA memory, unpack mode), ABAB.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
B=target/dev/new
for p in ${PATTERNS:-sendrecv fullmesh}; do
  for round in $(seq 1 ${ROUNDS:-3}); do
    for poll in spin adaptive; do
      out=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x NCCL_NSOCKS_PERTHREAD=4 -x NCCL_DYNAMIC_CHUNK_SIZE=1048576 \
        $B/tcpx-perf --pattern $p --mem cuda --ranks-per-node 1 ${SIZES:--b 64M -e 1G -f 4} -n 10 -w 3 --chunk 2M --window 8 --channels 2 \
        --poll $poll -T 120 --no-out --progress never 2>&1)
      echo "$p round $round $poll: $(echo "$out" | awk '/^ +[0-9]/ {printf "%s=%s(w%s) ", $1, $6, $7}') $(echo "$out" | grep -i 'cpu' | grep -v '^#  ' | tail -1)"
    done
  done
done
