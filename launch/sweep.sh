#!/usr/bin/env bash
# Tuning sweep: one tcpx-perf run per variant, one line per variant with the bandwidth at each size.
# A variant is a word of comma-separated knobs (any left out take the defaults below):
#   nsocks=N    NCCL_NSOCKS_PERTHREAD (data sockets per comm, NCCL_SOCKET_NTHREADS=1)
#   cs=BYTES    NCCL_DYNAMIC_CHUNK_SIZE (bytes per socket chunk)
#   buf=BYTES   TCPXEMU_SOCKBUF (SO_SNDBUF/SO_RCVBUF of data sockets; 0 = kernel autotuning)
#   ch=N        --channels      chunk=SIZE  --chunk      win=N  --window
#   bind=none|numa|core         mpirun binding
# Usage (binaries in BIN_DIR):
#   PATTERN=fullmesh MEM=cuda SIZES="256M 1G" NP=4 launch/sweep.sh nsocks=2,ch=1 nsocks=4,buf=524288
# EXTRA_ENV="VAR=value ..." is passed to every run. Figures are the run's own table (GB = 1e9); the data check stays on unless CHECK=0.
set -uo pipefail
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
  nsocks=8 cs=1048576 buf=4194304 ch=2 chunk=4M win=8 bind=none
  IFS=, read -ra kv <<<"$variant"
  for a in "${kv[@]}"; do
    case "${a%%=*}" in
      nsocks | cs | buf | ch | chunk | win | bind) printf -v "${a%%=*}" '%s' "${a#*=}" ;;
      *) echo "sweep: unknown knob '${a%%=*}' in '$variant' (nsocks cs buf ch chunk win bind)" >&2; exit 64 ;;
    esac
  done
  case "$bind" in
    none) binding=(--bind-to none) ;;
    numa) binding=(--map-by numa --bind-to numa) ;;
    core) binding=(--map-by core --bind-to core) ;;
    *) echo "sweep: bind=$bind (none|numa|core)" >&2; exit 64 ;;
  esac
  line=$(printf '%-44s' "$variant")
  for size in $SIZES; do
    out=$(mpirun "${ROOT[@]}" --oversubscribe "${binding[@]}" -np "$NP" \
      -x NCCL_NSOCKS_PERTHREAD="$nsocks" -x NCCL_SOCKET_NTHREADS=1 -x NCCL_DYNAMIC_CHUNK_SIZE="$cs" \
      -x TCPXEMU_SOCKBUF="$buf" "${extra[@]}" \
      "$BIN_DIR/tcpx-perf" --pattern "$PATTERN" --mem "$MEM" -b "$size" -e "$size" -n "$ITERS" -w "$WARMUP" \
      -c "$CHECK" --chunk "$chunk" --window "$win" --channels "$ch" -T 120 --no-out --progress never 2>&1)
    r=$?
    bw=$(echo "$out" | awk '/^ +[0-9]/ {printf "%s/%s", $5, $6; if ($7 != 0) printf "(wrong %s)", $7}')
    if [ $r -ne 0 ] || [ -z "$bw" ]; then
      bw="FAILED($r)"; rc=1
      echo "$out" | grep -v '^#' | tail -3 >&2
    fi
    line+=$(printf ' %6s %-14s' "$size" "$bw")
  done
  echo "$line"
done
exit $rc
