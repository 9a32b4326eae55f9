#!/usr/bin/env bash
# Every SECONDS (default 2) one line per tcpx-perf process of this host: t pid rank VmHWM VmRSS
# (kB), the rank from its OMPI_COMM_WORLD_RANK. A process's VmHWM is its peak so far, so the
# last line of a pid is its peak over the run (to within one interval before it exits).
# Usage: memory.sh OUTFILE [SECONDS] (runs until killed)
OUT=$1 EVERY=${2:-2}
start=$(date +%s)
while :; do
  t=$(($(date +%s) - start))
  for p in $(pgrep -x tcpx-perf); do
    r=$(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    awk -v t="$t" -v p="$p" -v r="${r:--}" '/^VmHWM:/ {h = $2} /^VmRSS:/ {s = $2} END {if (h) print t, p, r, h, s}' /proc/"$p"/status 2>/dev/null
  done >>"$OUT"
  sleep "$EVERY"
done
