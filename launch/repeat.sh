#!/usr/bin/env bash
# N independent runs of one tcpx-perf command, each its own mpirun (as launch/local.sh launches
# it), into one new folder of run folders: what `tcpx-analyze gate`, `make-baseline` and
# `runs-needed` take (docs/ci-gating.md). A gate's unit is the run: iterations of one launch
# share its placement and sockets, so N launches, not N x more iterations.
#   launch/repeat.sh N OUT [--np NP] -- TCPX-PERF FLAGS...
#   launch/repeat.sh 5 results/ci --np 4 -- --pattern sendrecv -b 1M -e 64M
# OUT/run01 .. OUT/runN are the result folders, OUT/run01.log .. their console output, and
# OUT/exits.tsv each run's exit status (tcpx-perf's: docs/files.md). Every run is made, even
# after one fails; the exit status is 0 when all succeeded, else the first failing run's.
# NP: MPI ranks per run (default 2). REPEAT_LAUNCH: the launcher per run, run as
# `$REPEAT_LAUNCH NP FLAGS... --out OUT/runI` (default launch/local.sh). REPEAT_TIMEOUT:
# seconds a run may take before it is ended (default 3600; tcpx-perf's own -T ends a silent one).
set -euo pipefail
usage="usage: launch/repeat.sh N OUT [--np NP] -- TCPX-PERF FLAGS... (e.g. launch/repeat.sh 5 results/ci -- --pattern sendrecv)"
fail() {
  echo "repeat.sh: $*" >&2
  exit 64
}
[ $# -ge 2 ] || fail "$usage"
n=$1 out=$2
shift 2
np=2
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --np)
      [ $# -ge 2 ] || fail "--np needs a number of ranks: $usage"
      np=$2
      shift 2
      ;;
    *) fail "unknown option $1 before --: $usage" ;;
  esac
done
[ "${1:-}" = "--" ] || fail "no -- before the tcpx-perf flags: $usage"
shift
# whole TEXT MAX: TEXT is a whole number from 1 to MAX.
whole() {
  [[ $1 =~ ^[0-9]{1,7}$ ]] && [ "$((10#$1))" -ge 1 ] && [ "$((10#$1))" -le "$2" ]
}
whole "$n" 1000 ||
  fail "N must be a whole number of runs from 1 to 1000 (got '$n'): a gate needs 2 or more per side (tcpx-analyze runs-needed says how many)"
n=$((10#$n))
whole "$np" 100000 || fail "--np must be a whole number of ranks >= 1 (got '$np')"
np=$((10#$np))
[ -n "$out" ] || fail "OUT is empty: name a new folder for the runs"
if [ -e "$out" ] || [ -L "$out" ]; then
  fail "$out exists: name a new folder (the runs never land on earlier files)"
fi
for f in "$@"; do
  case $f in
    --out | --out=* | --no-out) fail "the flags name $f: repeat.sh gives each run its own folder (OUT/runI); drop it" ;;
  esac
done
timeout_s=${REPEAT_TIMEOUT:-3600}
whole "$timeout_s" 1000000 || fail "REPEAT_TIMEOUT must be whole seconds from 1 (got '$timeout_s')"
here=$(cd "$(dirname "$0")" && pwd)
launch=${REPEAT_LAUNCH:-$here/local.sh}
mkdir -p -- "$(dirname -- "$out")"
mkdir -- "$out" || fail "cannot create $out"
width=${#n}
[ "$width" -ge 2 ] || width=2
first_fail=0
printf 'run\texit\n' >"$out/exits.tsv"
for i in $(seq 1 "$n"); do
  name=$(printf "run%0${width}d" "$i")
  echo "repeat.sh: $name of $n: $launch $np $* --out $out/$name"
  set +e
  timeout --kill-after=30 "$timeout_s" "$launch" "$np" "$@" --out "$out/$name" >"$out/$name.log" 2>&1
  rc=$?
  set -e
  printf '%s\t%s\n' "$name" "$rc" >>"$out/exits.tsv"
  if [ "$rc" -ne 0 ]; then
    echo "repeat.sh: $name exited $rc (its output: $out/$name.log)" >&2
    [ "$first_fail" -ne 0 ] || first_fail=$rc
  fi
done
failed=$(awk -F'\t' 'NR > 1 && $2 != 0' "$out/exits.tsv" | wc -l)
echo "repeat.sh: $n runs in $out, $failed failed (each run's exit status: $out/exits.tsv)"
exit "$first_fail"
