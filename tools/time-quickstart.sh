#!/usr/bin/env bash
# Times the README's quick start as a new user meets it: a fresh clone (of REPO at REV, default
# this checkout's HEAD) in a new directory with an empty target directory, then
# `bash launch/quickstart.sh`, every line it prints stamped with the seconds since the start.
# Prints the load before and after (uptime) and when each phase ended: setup (packages, Rust),
# build (tcpx-perf and the plugins), the first table row, the end of the run.
#   tools/time-quickstart.sh                      # this checkout's HEAD
#   REPO=/path/to/clone REV=main tools/time-quickstart.sh
# Knobs: WORK (where the clone goes; default a new directory under /tmp, kept, with quickstart.log),
# CARGO_PROFILE_RELEASE_DEBUG etc. pass through to cargo as usual (to time a profile variant).
# Extra arguments go to quickstart.sh. Exit: quickstart's status.
set -euo pipefail
REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
REV=${REV:-HEAD}
WORK=${WORK:-$(mktemp -d /tmp/time-quickstart.XXXXXX)}
unset CARGO_TARGET_DIR
commit=$(git -C "$REPO" rev-parse "$REV")
git clone -q --no-checkout "$REPO" "$WORK/repo"
git -C "$WORK/repo" checkout -q "$commit"
echo "# commit $commit in $WORK/repo (target/ empty), $(nproc) cores"
echo "# load before: $(uptime)"
cd "$WORK/repo"
start=$EPOCHREALTIME
set +e
bash launch/quickstart.sh "$@" 2>&1 | while IFS= read -r line; do
  printf '%8.1f %s\n' "$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "$line"
done > "$WORK/quickstart.log"
status=${PIPESTATUS[0]}
set -e
echo "# load after: $(uptime)"
# The phases: the last setup line, the build's summary line, the first row of the table, the end.
awk '/^ *[0-9.]+ setup: / { setup = $1 } / built: / { built = $1 }
     /^ *[0-9.]+ +[0-9]+ +[0-9]+ +float / && !row { row = $1 } { last = $1 }
     END { printf "setup %s s, built %s s, first table row %s s, end %s s\n", setup, built, row, last }' "$WORK/quickstart.log"
echo "# log: $WORK/quickstart.log (exit $status)"
exit "$status"
