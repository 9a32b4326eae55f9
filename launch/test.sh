#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs the whole test suite (what CI runs):
# unit tests, plugin tests over real sockets, and MPI runs of every pattern on tcpx-emu.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite's tools too: Slurm (tests/slurm.rs starts a local one), shellcheck, chromium, ...
bash launch/setup.sh --tests
export PATH="$HOME/.cargo/bin:$PATH"
bash launch/build.sh --all
# Lints first (fast: a check build over the dependencies already built): formatting, and clippy
# with warnings denied ([workspace.lints] in Cargo.toml). A lint failure fails the suite at the
# end, after the tests have run, so one push shows both.
lint=0
cargo fmt --all --check || { echo "test.sh: cargo fmt --all --check failed: run cargo fmt --all" >&2; lint=1; }
cargo clippy --release --workspace --all-targets -- -D warnings || { echo "test.sh: clippy found warnings (above)" >&2; lint=1; }
# Open MPI refuses root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The run history's tests run on SQLite and on PostgreSQL: a private server for them
# (launch/postgres/local-postgres.sh, about 3 s), its URL (a secret: exported, never printed),
# stopped when the suite ends. Where it cannot start, those tests fail in CI and skip elsewhere.
log=$(mktemp)
trap 'rm -f "$log"; bash launch/postgres/local-postgres.sh stop 2>/dev/null || true' EXIT
if bash launch/postgres/local-postgres.sh start && TCPX_TEST_POSTGRES_URL=$(bash launch/postgres/local-postgres.sh url); then
  export TCPX_TEST_POSTGRES_URL
else
  echo "test.sh: no local PostgreSQL server (above): the history's PostgreSQL tests skip, or fail in CI" >&2
fi
# The suite leaves the host's settings as it found them: the rigs raise these host-wide ones
# and give them back (launch/cluster.sh's host records); checked after the tests.
host_settings() {
  local f v out=""
  for f in /proc/sys/net/ipv4/neigh/default/gc_thresh{1,2,3} /proc/sys/net/core/netdev_max_backlog; do
    v=""
    [ -r "$f" ] && read -r v <"$f"
    out+="$v "
  done
  echo "$out"
}
settings_before=$(host_settings)
# Two cores run up to 4 ranks plus test threads: one test binary at a time, two tests at once.
set +e
cargo test --release --workspace --no-fail-fast -- --test-threads=2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# cargo prints one summary per test binary after its `Running <source> (<binary>)` line (the last
# is often an empty doc-test run): the slowest binaries by their own "finished in" time, so that
# one growing slow is seen, then the counts added up.
awk '/^ *(Running|Doc-tests) / { sub(/^ *Running (unittests )?/, ""); sub(/^ *Doc-tests /, "doc-tests "); sub(/ \(.*\/deps\//, " ("); sub(/-[0-9a-f]+\)$/, ")"); name = $0 }
     /^test result:/ && match($0, /finished in [0-9.]+s/) { print substr($0, RSTART + 12, RLENGTH - 13), name }' "$log" |
  sort -rn | awk 'NR == 1 { print "slowest test binaries (seconds, tests only):" }
                 NR <= 8 { printf "  %7.1f  %s\n", $1, substr($0, index($0, " ") + 1) }'
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
[ "$lint" -eq 0 ] || { echo "test.sh: lints failed (fmt or clippy, above)"; [ "$status" -ne 0 ] || status=1; }
settings_after=$(host_settings)
if [ "$settings_before" != "$settings_after" ]; then
  echo "test.sh: the suite changed the host's settings (gc_thresh1..3, netdev_max_backlog): before ${settings_before% }, after ${settings_after% }" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
