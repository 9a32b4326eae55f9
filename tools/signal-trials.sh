#!/usr/bin/env bash
# Ends a slow tcpx-perf sweep with a signal, TRIALS times, and counts how summary.json says the
# run ended: every trial should say "interrupted" (see src/signals.rs for why that needs the
# other ranks to linger). Prints one line per trial and the tally.
#
# Variables: BIN_DIR (default target/release), OUT_DIR (default /tmp/tcpx-perf-signal-trials),
#            TRIALS (default 10), SIGNAL (TERM or INT, default TERM), TARGET (mpirun, default,
#            or a rank number), NP (default 4).
# Example:   TRIALS=20 SIGNAL=INT tools/signal-trials.sh
set -euo pipefail

bin_dir=${BIN_DIR:-target/release}
out_dir=${OUT_DIR:-/tmp/tcpx-perf-signal-trials}
trials=${TRIALS:-10}
signal=${SIGNAL:-TERM}
target=${TARGET:-mpirun}
np=${NP:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TCPXEMU_FAULT=slow

# The pid of rank $1 among mpirun $2's children.
rank_pid() {
    local pid
    for pid in $(pgrep -P "$2"); do
        if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
            echo "$pid"
            return
        fi
    done
    echo "no rank $1 under mpirun $2" >&2
    return 1
}

rm -rf "$out_dir"
mkdir -p "$out_dir"
declare -A tally=()
for i in $(seq 1 "$trials"); do
    dir=$out_dir/trial$i
    mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none -np "$np" \
        "$bin_dir/tcpx-perf" --pattern sendrecv -b 64K -e 4M -n 150 -w 1 --progress never -T 20 \
        --out "$dir/out" > "$out_dir/trial$i.stdout" 2> "$out_dir/trial$i.stderr" &
    mpirun_pid=$!
    # Strike once two sizes are on disk (header + 2 rows), within 20 s.
    for _ in $(seq 1 2000); do
        [ -f "$dir/out/results.csv" ] && [ "$(wc -l < "$dir/out/results.csv")" -ge 3 ] && break
        sleep 0.01
    done
    victim=$mpirun_pid
    [ "$target" = mpirun ] || victim=$(rank_pid "$target" "$mpirun_pid")
    start=$(date +%s.%N)
    kill -"$signal" "$victim"
    rc=0
    wait "$mpirun_pid" || rc=$?
    took=$(echo "$(date +%s.%N) - $start" | bc)
    status=$(sed -n 's/^ *"status": "\([a-z-]*\)".*/\1/p' "$dir/out/summary.json" | head -1)
    done_sizes=$(sed -n 's/^ *"sizes_done": \([0-9]*\).*/\1/p' "$dir/out/summary.json" | head -1)
    echo "trial $i: exit $rc, status ${status:-none}, sizes done ${done_sizes:-?}, ended ${took} s after SIG$signal to $target"
    tally[${status:-none}]=$(( ${tally[${status:-none}]:-0} + 1 ))
done
for status in "${!tally[@]}"; do
    echo "$status: ${tally[$status]} of $trials"
done
