#!/usr/bin/env bash
# Same-call A/B of two builds: the same tcpx-perf command with the binaries (and plugin) of
# OLD_DIR and NEW_DIR, alternated ROUNDS times (ABAB..., so drift hits both alike). Prints one
# line per run with busbw per size, then per size the median busbw of each side and new/old.
# Usage: OLD_DIR=.device/old NEW_DIR=.device/bin NP=2 tools/ab-binaries.sh --pattern sendrecv -b 64M -e 1G
# Both directories hold tcpx-perf and libnccl_net_tcpxemu.so; MPI_ARGS adds mpirun flags
# (e.g. "-x NCCL_NSOCKS_PERTHREAD=4"). Figures are the runs' own tables (GB = 1e9).
set -uo pipefail
: "${OLD_DIR:?set OLD_DIR to the old build's directory}" "${NEW_DIR:?set NEW_DIR to the new build's directory}"
NP=${NP:-2}
ROUNDS=${ROUNDS:-2}
export NCCL_NVLS_ENABLE=0
[ "$(id -u)" -eq 0 ] && ROOT=(--allow-run-as-root) || ROOT=()
read -r -a extra <<<"${MPI_ARGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for round in $(seq 1 "$ROUNDS"); do
  for side in old new; do
    dir=$OLD_DIR; [ "$side" = new ] && dir=$NEW_DIR
    out=$(mpirun "${ROOT[@]}" --oversubscribe --bind-to none -np "$NP" "${extra[@]}" \
      "$dir/tcpx-perf" "$@" --no-out --progress never 2>&1)
    r=$?
    rows=$(echo "$out" | awk '/^ +[0-9]/ {print $1, $8}')
    if [ $r -ne 0 ] || [ -z "$rows" ]; then
      echo "$side round $round: FAILED ($r)"; echo "$out" | grep -v '^#' | tail -5; rc=1; continue
    fi
    echo "$rows" >>"$tmp/$side"
    echo "$side round $round busbw:" $(echo "$rows" | awk '{printf "%s=%s ", $1, $2}')
  done
done
[ -s "$tmp/old" ] && [ -s "$tmp/new" ] || exit 1
echo "# size  old_median_busbw  new_median_busbw  new/old"
for size in $(awk '{print $1}' "$tmp/old" | sort -n -u); do
  med() { awk -v s="$size" '$1 == s {print $2}' "$1" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
  o=$(med "$tmp/old"); n=$(med "$tmp/new")
  awk -v s="$size" -v o="$o" -v n="$n" 'BEGIN {printf "%11s  %8.2f  %8.2f  %6.3f\n", s, o, n, n / o}'
done
exit $rc
