#!/usr/bin/env bash
# Tuning sweep: one tcpx-perf run per variant, one line per variant with the bandwidth at each size.
# A variant is a word of comma-separated knobs (nsocks cs buf ch chunk win bind; see
# tools/variant.sh for their meaning and defaults).
# Usage (binaries in BIN_DIR):
#   PATTERN=fullmesh MEM=cuda SIZES="256M 1G" NP=4 tools/sweep.sh nsocks=2,ch=1 nsocks=4,buf=524288
# EXTRA_ENV="VAR=value ..." is passed to every run. Figures are the run's own table (GB = 1e9); the data check stays on unless CHECK=0.
set -uo pipefail
. "$(dirname "$0")/variant.sh"
BIN_DIR=${BIN_DIR:-target/release}
PATTERN=${PATTERN:-sendrecv}
MEM=${MEM:-auto}
SIZES=${SIZES:-256M 1G}
NP=${NP:-4}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
CHECK=${CHECK:-1}
export NCCL_NVLS_ENABLE=0
[ "$(id -u)" -eq 0 ] && ROOT=(--allow-run-as-root) || ROOT=()

printf '# %s --mem %s, %d ranks, -n %d -w %d -c %d; columns: variant, then algbw/busbw (GB/s) per size\n' \
  "$PATTERN" "$MEM" "$NP" "$ITERS" "$WARMUP" "$CHECK"
extra=()
for e in ${EXTRA_ENV:-}; do extra+=(-x "$e"); done # more VAR=value for every run
rc=0
for variant in "$@"; do
  variant_parse "$variant" || exit 64
  line=$(printf '%-44s' "$variant")
  for size in $SIZES; do
    out=$(mpirun "${ROOT[@]}" --oversubscribe "${variant_binding[@]}" -np "$NP" "${variant_env[@]}" "${extra[@]}" \
      "$BIN_DIR/tcpx-perf" --pattern "$PATTERN" --mem "$MEM" -b "$size" -e "$size" -n "$ITERS" -w "$WARMUP" \
      -c "$CHECK" "${variant_args[@]}" -T 120 --no-out --progress never 2>&1)
    r=$?
    bw=$(echo "$out" | awk '/^ +[0-9]/ {printf "%s/%s", $7, $8; if ($9 != 0) printf "(wrong %s)", $9}')
    if [ $r -ne 0 ] || [ -z "$bw" ]; then
      bw="FAILED($r)"; rc=1
      echo "$out" | grep -v '^#' | tail -3 >&2
    fi
    line+=$(printf ' %6s %-14s' "$size" "$bw")
  done
  echo "$line"
done
exit $rc
