#!/usr/bin/env bash
# Where the ranks' threads are, DELAY seconds from now: for the first 3 tcpx-perf processes
# (rank order unknown) every thread's name, state, kernel wait channel, current syscall and CPU
# ticks, twice 5 s apart (ticks that grow: spinning), and gdb's backtraces where gdb exists.
# Usage: stacks.sh DELAY OUTFILE
sleep "$1"
out=$2
for pass in 1 2; do
  for pid in $(pgrep -x tcpx-perf | head -3); do
    echo "== pass $pass pid $pid rank ${OMPI_RANK:-?} $(tr '\0' '\n' </proc/"$pid"/environ 2>/dev/null | grep -m1 OMPI_COMM_WORLD_RANK)"
    for t in /proc/"$pid"/task/*; do
      echo "$(cat "$t"/comm) state=$(awk '{print $3}' "$t"/stat) ticks=$(awk '{print $14+$15}' "$t"/stat) wchan=$(cat "$t"/wchan) syscall=$(cut -d' ' -f1 "$t"/syscall 2>/dev/null)"
    done
  done >>"$out"
  sleep 5
done
if command -v gdb >/dev/null; then
  for pid in $(pgrep -x tcpx-perf | head -2); do
    timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt 12' >>"$out" 2>&1
  done
else
  echo "no gdb on this host" >>"$out"
fi
