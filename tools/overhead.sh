#!/usr/bin/env bash
# Harness overhead: the bare plugin (examples/bare_pairs: one process, a sending and a receiving
# thread, nothing else) against `tcpx-perf --pattern pairs --dir uni -a 3` (the slower side's
# time, as bare_pairs reports it) on the same plugin file and knobs, alternated ROUNDS times per
# socket count in one call. Prints every run, then per (sockets, size) the median GB/s of each,
# tcpx-perf/bare, and each side's CPU seconds per GB (user + system, every thread). GB = 1e9 bytes.
#
#   tools/overhead.sh                                # target/release build, sockets 1 2 4 8
#   SOCKS="8" SIZES="64M 1G" ROUNDS=5 tools/overhead.sh --poll spin   # extra args go to tcpx-perf
#
# BIN_DIR holds tcpx-perf, bare_pairs and libnccl_net_tcpxemu_v7.so (default: target/release,
# bare_pairs from target/release/examples). Knobs (environment): SOCKS, SIZES (first and last
# are -b/-e, -f FACTOR (2)), CHUNK (64M), WINDOW (8), ITERS (8), WARMUP (2), ROUNDS (3), NP (2; NP=1 with
# `-g 2` puts both endpoints in one process), BARE_POLL (sleep|spin|adaptive), TCPXEMU_MODE
# (host), and any NCCL_*/TCPXEMU_* variable, which both sides see.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${BIN_DIR:-target/release}
BARE=$BIN_DIR/bare_pairs
[ -x "$BARE" ] || BARE=$BIN_DIR/examples/bare_pairs
PLUGIN=$(realpath "$BIN_DIR/libnccl_net_tcpxemu_v7.so" 2>/dev/null)
for f in "$BIN_DIR/tcpx-perf" "$BARE" "$PLUGIN"; do
  [ -e "$f" ] || { echo "overhead.sh: $f is missing: cargo build --release --workspace --examples (or set BIN_DIR)" >&2; exit 1; }
done
SOCKS=${SOCKS:-1 2 4 8}
read -r -a sizes <<<"${SIZES:-64M 1G}"
MINB=${sizes[0]}
MAXB=${sizes[${#sizes[@]}-1]}
CHUNK=${CHUNK:-64M}; WINDOW=${WINDOW:-8}; ITERS=${ITERS:-8}; WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}; NP=${NP:-2}; BARE_POLL=${BARE_POLL:-sleep}
export TCPXEMU_MODE=${TCPXEMU_MODE:-host}
# What tcpx-perf sets for its built-in tcpx-emu when unset (strict tcpx-emu moves nothing without it).
export NCCL_DYNAMIC_CHUNK_SIZE=${NCCL_DYNAMIC_CHUNK_SIZE:-524288}
source launch/mpirun-args.sh
common=(-b "$MINB" -e "$MAXB" -f "${FACTOR:-2}" --chunk "$CHUNK" --window "$WINDOW" -n "$ITERS" -w "$WARMUP")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# overhead.sh: plugin $PLUGIN, TCPXEMU_MODE=$TCPXEMU_MODE, sizes $MINB..$MAXB, chunk $CHUNK, window $WINDOW, -n $ITERS -w $WARMUP, $ROUNDS rounds, bare --poll $BARE_POLL, tcpx-perf -np $NP $*"
echo "# host: $(hostname), $(nproc) CPUs; $(env | grep -E '^(NCCL|TCPXEMU)_' | sort | tr '\n' ' ')"
rc=0
for k in $SOCKS; do
  export NCCL_NSOCKS_PERTHREAD=$k
  for round in $(seq 1 "$ROUNDS"); do
    # bare: "RESULT size time_us algbw cpu_s_per_gb cores"
    out=$("$BARE" --plugin "$PLUGIN" "${common[@]}" --poll "$BARE_POLL" 2>&1)
    if ! grep -q '^RESULT' <<<"$out"; then echo "bare k=$k round $round FAILED"; tail -5 <<<"$out"; rc=1; continue; fi
    awk -v k="$k" '/^RESULT/ {print k, $2, $4, $5, $2 / $7 / 1e3}' <<<"$out" >>"$tmp/bare"
    echo "bare     k=$k round $round GB/s:" $(awk '/^RESULT/ {printf "%s=%s ", $2, $4}' <<<"$out")
    # tcpx-perf: rows (size ... algbw in column 7, t_med in 14), then the CPU footer "# size user sys max cores cpu_s/GB"
    out=$(mpirun "${MPIRUN_ARGS[@]}" -np "$NP" -x NCCL_NSOCKS_PERTHREAD -x TCPXEMU_MODE -x NCCL_DYNAMIC_CHUNK_SIZE \
      "$BIN_DIR/tcpx-perf" --plugin "$PLUGIN" --pattern pairs --dir uni --mem host "${common[@]}" \
      -c 0 -a 3 --no-out --progress never "$@" 2>&1)
    r=$?
    rows=$(awk '/^ +[0-9]/ {print $1, $7, $1 / $14 / 1e3}' <<<"$out")
    if [ $r -ne 0 ] || [ -z "$rows" ]; then echo "tcpx-perf k=$k round $round FAILED ($r)"; grep -v '^#' <<<"$out" | tail -5; rc=1; continue; fi
    # CPU per size from the footer (nan from a build without it).
    awk -v k="$k" '/^# +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.N\/A]+$/ {cpu[$2] = $7}
      /^ +[0-9]/ {size[++n] = $1; bw[n] = $7; med[n] = $1 / $14 / 1e3}
      END {for (i = 1; i <= n; i++) print k, size[i], bw[i], (size[i] in cpu ? cpu[size[i]] : "nan"), med[i]}' <<<"$out" >>"$tmp/perf"
    echo "tcpx-perf k=$k round $round GB/s:" $(awk '{printf "%s=%s ", $1, $2}' <<<"$rows")
  done
done
[ -s "$tmp/bare" ] && [ -s "$tmp/perf" ] || exit 1
med() { awk -v k="$2" -v s="$3" -v c="$4" '$1 == k && $2 == s {print $c}' "$1" | sort -g |
  awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "# GB/s = size / mean iteration time (the headline figure); t_med: size / median iteration time"
echo "# medians over $ROUNDS rounds of each run's figure"
echo "# sockets        size   bare_GB/s   perf_GB/s  perf/bare  t_med perf/bare  bare_cpu_s/GB  perf_cpu_s/GB"
for k in $SOCKS; do
  for s in $(awk -v k="$k" '$1 == k {print $2}' "$tmp/bare" | sort -n -u); do
    b=$(med "$tmp/bare" "$k" "$s" 3); p=$(med "$tmp/perf" "$k" "$s" 3)
    bc=$(med "$tmp/bare" "$k" "$s" 4); pc=$(med "$tmp/perf" "$k" "$s" 4)
    bm=$(med "$tmp/bare" "$k" "$s" 5); pm=$(med "$tmp/perf" "$k" "$s" 5)
    awk -v k="$k" -v s="$s" -v b="$b" -v p="$p" -v bc="$bc" -v pc="$pc" -v bm="$bm" -v pm="$pm" \
      'BEGIN {printf "%9s %11s %11.2f %11.2f %10.3f %16.3f %14.4f %14.4f\n", k, s, b, p, (b > 0 ? p / b : 0), (bm > 0 ? pm / bm : 0), bc, pc}'
  done
done
exit $rc
