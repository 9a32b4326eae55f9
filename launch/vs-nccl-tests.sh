#!/usr/bin/env bash
# tcpx-perf against nccl-tests on the same plugin file: sendrecv vs sendrecv_perf, ring vs
# all_reduce_perf, fullmesh vs alltoall_perf, alternated for ROUNDS rounds in one job (odd rounds
# tcpx-perf first, even rounds nccl-tests first). Prints per pattern and size the median busbw of
# each over the rounds, their ratio (tcpx-perf / nccl-tests; above 1 tcpx-perf is faster) and per
# pattern the geometric mean of the ratios over the sizes. GB = 10^9 bytes.
#
#   NCCL_TESTS=~/nccl-tests launch/vs-nccl-tests.sh              # a built checkout (build/*_perf)
#   NCCL_TESTS_SRC=~/nccl-tests-src launch/vs-nccl-tests.sh      # built here first (see below)
#   ROUNDS=5 MINB=64M MAXB=1G launch/vs-nccl-tests.sh --poll spin   # extra args go to tcpx-perf
#   VARIANTS='ch1=--channels 1;ch2=--channels 2' launch/vs-nccl-tests.sh   # several tcpx-perf columns
#
# nccl-tests is never shipped with tcpx-perf: this uses your copy. With NCCL_TESTS_SRC, its
# sendrecv_perf, all_reduce_perf and alltoall_perf are built (MPI=1) into NCCL_TESTS_BUILD
# (default SRC/build) with nvcc (CUDA_HOME, default /usr/local/cuda, or nvcc on PATH) for this
# host's GPU architecture (NVCC_GENCODE overrides), against the NCCL in NCCL_HOME (include/nccl.h,
# lib/libnccl.so*) or else PyTorch's pip package (python3 -c 'import nvidia.nccl'), and the MPI
# in MPI_HOME (include/mpi.h; libmpi from MPI_HOME/lib or the loader's cache) or else mpicc's.
#
# Both tools get the same NCCL environment, what `tcpx-perf --baseline nccl` sets:
# NCCL_NET_PLUGIN=<the plugin file> NCCL_NET=<its name> NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
# NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0, and when unset NCCL_NET_GDR_LEVEL=SYS (tcpx-emu)
# and NCCL_PROTO=Simple (device-unpack plugins); tcpx-emu also gets NCCL_DYNAMIC_CHUNK_SIZE=524288
# when unset (tcpx-perf's default for it). Any NCCL_* / TCPXEMU_* you export reaches both.
#
# Knobs (environment): TCPX_PERF (target/release/tcpx-perf), PLUGIN (libnccl_net_tcpxemu_v7.so
# next to TCPX_PERF), PLUGIN_NAME (as the plugin names itself; default read from tcpx-perf's
# results.csv), PATTERNS ("sendrecv ring fullmesh"), NP (2 ranks, one GPU each), MINB MAXB STEPF
# (16M 1G 4), ITERS (20), WARMUP (5; tcpx-perf warms up before every size, nccl-tests once
# before the sweep: each tool as its users run it), ROUNDS (3), VARIANTS ('name=tcpx-perf args;...',
# default one column "tcpx-perf" with no extra args), RUN_TIMEOUT (seconds per run, 900),
# VS_OUT (results/<UTC time>-vs-nccl-tests, a new folder: every run's output, NCCL's logs, raw.csv, table.md),
# VS_NCCL_SUBSYS (NCCL_DEBUG_SUBSYS of the logs, INIT,NET), HOSTFILE (passed to mpirun).
# Exit: 0 table printed; 1 a run failed (its log is named); 2 setup error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
die() { echo "vs-nccl-tests: $*" >&2; exit 2; }

TCPX_PERF=${TCPX_PERF:-target/release/tcpx-perf}
[ -x "$TCPX_PERF" ] || die "$TCPX_PERF is missing: cargo build --release (or set TCPX_PERF)"
TCPX_PERF=$(realpath "$TCPX_PERF")
PLUGIN=$(realpath "${PLUGIN:-$(dirname "$TCPX_PERF")/libnccl_net_tcpxemu_v7.so}" 2>/dev/null) ||
  die "plugin file not found: set PLUGIN to the .so both tools load"
[ -f "$PLUGIN" ] || die "$PLUGIN is not a file: set PLUGIN to the .so both tools load"
PATTERNS=${PATTERNS:-sendrecv ring fullmesh}
NP=${NP:-2}; MINB=${MINB:-16M}; MAXB=${MAXB:-1G}; STEPF=${STEPF:-4}
ITERS=${ITERS:-20}; WARMUP=${WARMUP:-5}; ROUNDS=${ROUNDS:-3}; RUN_TIMEOUT=${RUN_TIMEOUT:-900}
VS_OUT=${VS_OUT:-results/$(date -u +%Y%m%dT%H%M%SZ)-vs-nccl-tests}
for v in NP STEPF ITERS WARMUP ROUNDS RUN_TIMEOUT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v} is not a positive integer"
done
nccl_bin() {
  case $1 in
    sendrecv) echo sendrecv_perf ;;
    ring) echo all_reduce_perf ;;
    fullmesh) echo alltoall_perf ;;
    *) die "pattern '$1' has no nccl-tests counterpart: PATTERNS takes sendrecv, ring, fullmesh" ;;
  esac
}
for p in $PATTERNS; do nccl_bin "$p" >/dev/null; done

# ---- where NCCL comes from (build, and the library nccl-tests loads) ----
# NCCL_HOME, else PyTorch's pip NCCL (nvidia.nccl, or wherever under the nvidia namespace
# package libnccl.so.2 and nccl.h lie: the cu13 wheels moved them).
nccl_inc="" nccl_libdir=""
if [ -n "${NCCL_HOME:-}" ]; then
  nccl_inc=$NCCL_HOME/include; nccl_libdir=$NCCL_HOME/lib
else
  for d in $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
    lib=$(find "$d" -name 'libnccl.so*' 2>/dev/null | sort | head -1)
    inc=$(find "$d" -name nccl.h 2>/dev/null | head -1)
    [ -n "$lib" ] && [ -n "$inc" ] && { nccl_libdir=$(dirname "$lib"); nccl_inc=$(dirname "$inc"); break; }
  done
fi
ls "$nccl_libdir"/libnccl.so* >/dev/null 2>&1 || nccl_libdir=""

# ---- nccl-tests: a built checkout, or its source built here ----
build_nccl_tests() {
  local src=$1 build=$2
  [ -f "$src/src/common.cu" ] || die "NCCL_TESTS_SRC=$src does not look like nccl-tests' source (no src/common.cu)"
  { [ -n "$nccl_libdir" ] && [ -f "$nccl_inc/nccl.h" ]; } ||
    die "no NCCL to build nccl-tests against: set NCCL_HOME (include/nccl.h, lib/libnccl.so*) or pip install nvidia-nccl-cu13"
  local cuda=${CUDA_HOME:-}
  if [ -z "$cuda" ]; then
    if [ -x /usr/local/cuda/bin/nvcc ]; then cuda=/usr/local/cuda
    elif command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(realpath "$(command -v nvcc)")")")
    else die "nvcc not found: set CUDA_HOME (nccl-tests is built with nvcc)"; fi
  fi
  local mpi_inc="" mpi_lib=""
  if [ -n "${MPI_HOME:-}" ]; then
    mpi_inc=$MPI_HOME/include
    mpi_lib=$(ls "$MPI_HOME"/lib/libmpi.so* "$MPI_HOME"/lib64/libmpi.so* 2>/dev/null | head -1)
  elif command -v mpicc >/dev/null; then
    mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
  fi
  [ -f "$mpi_inc/mpi.h" ] || die "mpi.h not found (MPI_HOME=${MPI_HOME:-unset}): set MPI_HOME to a directory with include/mpi.h"
  [ -n "$mpi_lib" ] || mpi_lib=$(ldconfig -p | awk '/libmpi\.so(\.[0-9]+)* /{print $NF; exit}')
  [ -n "$mpi_lib" ] || mpi_lib=$(ls /usr/lib/x86_64-linux-gnu/libmpi.so* /usr/lib64/libmpi.so* \
    "$(dirname "$(command -v mpirun)")"/../lib/libmpi.so* 2>/dev/null | head -1)
  [ -n "$mpi_lib" ] && [ -f "$mpi_lib" ] || die "libmpi.so not found: set MPI_HOME to a directory with lib/libmpi.so"
  # nccl-tests' Makefile wants NCCL_HOME/{include,lib/libnccl.so} and MPI_HOME/{include,lib/libmpi.so}:
  # pip's NCCL and a runtime-only MPI have versioned names only, so link through a shim.
  local shim=$build/shim
  mkdir -p "$shim/nccl/lib" "$shim/mpi/lib" || die "cannot create $shim"
  ln -sfn "$(realpath "$nccl_inc")" "$shim/nccl/include"
  ln -sf "$(ls "$nccl_libdir"/libnccl.so* | head -1)" "$shim/nccl/lib/libnccl.so"
  ln -sfn "$(realpath "$mpi_inc")" "$shim/mpi/include"
  ln -sf "$mpi_lib" "$shim/mpi/lib/libmpi.so"
  local gencode=${NVCC_GENCODE:-}
  if [ -z "$gencode" ]; then
    local caps
    caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u)
    for c in $caps; do gencode+=" -gencode=arch=compute_$c,code=sm_$c"; done
  fi
  echo "# building nccl-tests from $src into $build (NCCL $nccl_inc + $nccl_libdir, MPI $mpi_inc + $mpi_lib, CUDA $cuda,${gencode:- every architecture})"
  local targets=()
  for p in $PATTERNS; do targets+=("$build/$(nccl_bin "$p")"); done
  make -C "$src/src" -j "$(nproc)" MPI=1 MPI_HOME="$shim/mpi" NCCL_HOME="$shim/nccl" CUDA_HOME="$cuda" \
    ${gencode:+NVCC_GENCODE="$gencode"} BUILDDIR="$build" "${targets[@]}" >"$build/build.log" 2>&1 ||
    die "building nccl-tests failed: see $build/build.log ($(tail -3 "$build/build.log" | tr '\n' ' '))"
}
if [ -n "${NCCL_TESTS:-}" ]; then
  NT_BIN=$NCCL_TESTS/build
  [ -d "$NT_BIN" ] || NT_BIN=$NCCL_TESTS
elif [ -n "${NCCL_TESTS_SRC:-}" ]; then
  src=$(realpath "$NCCL_TESTS_SRC") || die "NCCL_TESTS_SRC=$NCCL_TESTS_SRC not found"
  NT_BIN=$(realpath -m "${NCCL_TESTS_BUILD:-$src/build}")
  build_nccl_tests "$src" "$NT_BIN"
else
  die "set NCCL_TESTS to a built nccl-tests checkout (MPI=1) or NCCL_TESTS_SRC to its source"
fi
for p in $PATTERNS; do
  [ -x "$NT_BIN/$(nccl_bin "$p")" ] || die "$NT_BIN/$(nccl_bin "$p") is missing: build nccl-tests with MPI=1 (or set NCCL_TESTS_SRC)"
done

# ---- the environment both tools share ----
export NCCL_NET_PLUGIN=$PLUGIN NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=0
case $(basename "$PLUGIN") in
  *tcpxemu*)
    export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-SYS}
    export NCCL_DYNAMIC_CHUNK_SIZE=${NCCL_DYNAMIC_CHUNK_SIZE:-524288}
    [ "${TCPXEMU_MODE:-auto}" = host ] || export NCCL_PROTO=${NCCL_PROTO:-Simple} ;;
  *tcpx*) export NCCL_PROTO=${NCCL_PROTO:-Simple} ;;
esac
source launch/mpirun-args.sh
[ -n "${HOSTFILE:-}" ] && MPIRUN_ARGS+=(--hostfile "$HOSTFILE")
# A folder of its own, made here: an existing VS_OUT (another comparison's, or a link planted
# where it goes) is refused before anything is written, so no file of this script goes through a
# link or joins another run's.
mkdir -p "$(dirname "$VS_OUT")" || die "cannot create $(dirname "$VS_OUT")"
{ [ ! -e "$VS_OUT" ] && [ ! -L "$VS_OUT" ] && mkdir "$VS_OUT" 2>/dev/null; } ||
  die "VS_OUT $VS_OUT exists (or cannot be made): choose a new folder"
mkdir "$VS_OUT/logs" || die "cannot create $VS_OUT/logs"
VS_OUT=$(realpath "$VS_OUT")
raw=$VS_OUT/raw.csv
echo "tool,variant,pattern,round,size_bytes,busbw_gbps" >"$raw"

# Variants: name=args separated by ';' (default: one column, tcpx-perf as given).
IFS=';' read -r -a variants <<<"${VARIANTS:-tcpx-perf=}"
for v in "${variants[@]}"; do [[ $v == *=* && ${v%%=*} =~ ^[A-Za-z0-9_.+-]+$ ]] ||
  die "VARIANTS entry '$v' is not name=args (name in letters, digits, . _ + -)"; done

mpi_env() { # -x for every variable the ranks need, so a HOSTFILE job sees them too
  local a=() k
  for k in $(env | awk -F= '/^(NCCL|TCPXEMU)_/{print $1}') LD_LIBRARY_PATH; do
    [ -n "${!k:-}" ] && a+=(-x "$k")
  done
  printf '%s\n' "${a[@]}"
}

run_tcpx() { # variant-name round pattern -> raw rows
  local name=$1 round=$2 pat=$3 args
  args=$(for v in "${variants[@]}"; do [ "${v%%=*}" = "$name" ] && echo "${v#*=}"; done)
  local tag="r${round}-${pat}-${name}" dir=$VS_OUT/runs/r${round}-${pat}-${name}
  local log=$VS_OUT/logs/$tag.log
  local -a envx; mapfile -t envx < <(mpi_env)
  # shellcheck disable=SC2086 # the variant's args are words
  timeout --kill-after=15 "$RUN_TIMEOUT" mpirun -np "$NP" "${MPIRUN_ARGS[@]}" "${envx[@]}" "$TCPX_PERF" \
    --pattern "$pat" -b "$MINB" -e "$MAXB" -f "$STEPF" -n "$ITERS" -w "$WARMUP" --plugin "$PLUGIN" \
    --plugin-log info --out "$dir" $args "${EXTRA[@]}" >"$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "vs-nccl-tests: tcpx-perf $tag exited $rc: see $log" >&2; exit 1; }
  grep -q '"complete": *true' "$dir/summary.json" 2>/dev/null ||
    { echo "vs-nccl-tests: tcpx-perf $tag left no complete summary.json: see $log" >&2; exit 1; }
  if [ -z "${PLUGIN_NAME:-}" ]; then
    PLUGIN_NAME=$(awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i=="plugin")c=i;next}{print $c;exit}' "$dir/results.csv")
  fi
  awk -F, -v t=tcpx-perf -v n="$name" -v p="$pat" -v r="$round" '
    NR==1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { if ($col["wrong"] != "" && $col["wrong"] != 0) bad = 1
      print t "," n "," p "," r "," $col["size_bytes"] "," $col["busbw_gbps"] }
    END { exit bad }' "$dir/results.csv" >>"$raw" ||
    { echo "vs-nccl-tests: tcpx-perf $tag reported wrong data: see $dir/results.csv" >&2; exit 1; }
}

run_nccl() { # round pattern -> raw rows
  local round=$1 pat=$2 bin tag log nlog
  bin=$(nccl_bin "$pat"); tag="r${round}-${pat}-nccl-tests"
  log=$VS_OUT/logs/$tag.log; nlog=$VS_OUT/logs/$tag.nccl.%h.%p.log
  [ -n "${PLUGIN_NAME:-}" ] || die "the plugin's name is unknown: set PLUGIN_NAME"
  local -a envx
  (
    export NCCL_NET=$PLUGIN_NAME NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=${VS_NCCL_SUBSYS:-INIT,NET} NCCL_DEBUG_FILE=$nlog
    [ -n "$nccl_libdir" ] && export LD_LIBRARY_PATH=$nccl_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    mapfile -t envx < <(mpi_env)
    timeout --kill-after=15 "$RUN_TIMEOUT" mpirun -np "$NP" "${MPIRUN_ARGS[@]}" "${envx[@]}" "$NT_BIN/$bin" \
      -b "$MINB" -e "$MAXB" -f "$STEPF" -n "$ITERS" -w "$WARMUP" -g 1 -c 1 >"$log" 2>&1
  )
  local rc=$?
  [ $rc -eq 0 ] || { echo "vs-nccl-tests: $bin $tag exited $rc: see $log" >&2; exit 1; }
  # NCCL must have loaded and used the plugin (else it fell back to its own transport).
  local first; first=$(ls "$VS_OUT"/logs/"$tag".nccl.*.log 2>/dev/null | head -1)
  grep -q "Loaded net plugin $PLUGIN_NAME" "$first" 2>/dev/null && grep -q "Using network $PLUGIN_NAME" "$first" ||
    { echo "vs-nccl-tests: NCCL's log ($first) does not show it loaded and used plugin $PLUGIN_NAME" >&2; exit 1; }
  # Out-of-place busbw, located by the header (nccl-tests: size count type redop root time algbw busbw #wrong ...).
  awk -v t=nccl-tests -v n=nccl-tests -v p="$pat" -v r="$round" '
    !c && /^#/ && / busbw / { sub(/^#/, ""); for (i = 1; i <= NF; i++) if ($i == "busbw" && !c) c = i; next }
    c && $1 ~ /^[0-9]+$/ && NF > c {
      if ($(c + 1) != "N/A" && $(c + 1) != 0) bad = 1
      print t "," n "," p "," r "," $1 "," $c; rows++ }
    /Out of bounds values/ && !/ OK/ { bad = 1 }
    END { exit (bad || !rows) }' "$log" >>"$raw" ||
    { echo "vs-nccl-tests: $bin $tag: no rows, or wrong data: see $log" >&2; exit 1; }
}

EXTRA=("$@")
echo "# vs-nccl-tests: tcpx-perf $TCPX_PERF ($($TCPX_PERF --version 2>/dev/null)) vs nccl-tests $NT_BIN"
echo "# plugin $PLUGIN; -np $NP; -b $MINB -e $MAXB -f $STEPF -n $ITERS -w $WARMUP; $ROUNDS rounds; tcpx-perf extra args: ${EXTRA[*]:-none}"
echo "# variants: ${VARIANTS:-tcpx-perf=}"
echo "# env: $(env | grep -E '^(NCCL|TCPXEMU)_' | sort | tr '\n' ' ')"
echo "# NCCL for nccl-tests: ${nccl_libdir:-the loader search path}; host $(hostname), $(nproc) CPUs; logs under $VS_OUT"
for ((r = 1; r <= ROUNDS; r++)); do
  for p in $PATTERNS; do
    names=(); for v in "${variants[@]}"; do names+=("${v%%=*}"); done
    if ((r % 2)); then
      for n in "${names[@]}"; do run_tcpx "$n" "$r" "$p"; done
      run_nccl "$r" "$p"
    else
      run_nccl "$r" "$p"
      for ((i = ${#names[@]} - 1; i >= 0; i--)); do run_tcpx "${names[i]}" "$r" "$p"; done
    fi
    echo "# round $r $p done ($(date -u +%H:%M:%S))"
  done
done

# ---- medians, ratios, geomeans ----
variant_names=$(for v in "${variants[@]}"; do printf '%s ' "${v%%=*}"; done)
awk -F, -v names="$variant_names" -v pats="$PATTERNS" '
  function median(key,   n, i, j, a, t) {
    n = cnt[key]; for (i = 1; i <= n; i++) a[i] = val[key, i]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function human(b) { return b >= 2^30 && b % 2^30 == 0 ? b / 2^30 " GiB" : b >= 2^20 && b % 2^20 == 0 ? b / 2^20 " MiB" : b " B" }
  NR == 1 { next }
  { key = $2 SUBSEP $3 SUBSEP $5; val[key, ++cnt[key]] = $6; if (!(($3, $5) in seen)) { seen[$3, $5] = 1; sizes[$3] = sizes[$3] " " $5 } }
  END {
    nv = split(names, v, " "); np = split(pats, p, " ")
    hdr = "| pattern | size | nccl-tests busbw"; sep = "|---|---|---"
    for (i = 1; i <= nv; i++) { hdr = hdr " | " v[i] " busbw | " v[i] " / nccl-tests"; sep = sep "|---|---" }
    print hdr " |"; print sep "|"
    for (k = 1; k <= np; k++) {
      ns = split(sizes[p[k]], s, " ")
      for (i = 1; i <= nv; i++) { lsum[i] = 0; lcount[i] = 0 }
      for (j = 1; j <= ns; j++) {
        nk = "nccl-tests" SUBSEP p[k] SUBSEP s[j]
        if (!cnt[nk]) { print "vs-nccl-tests: nccl-tests has no row for " p[k] " " s[j] > "/dev/stderr"; bad = 1; continue }
        nm = median(nk); line = "| " p[k] " | " human(s[j]) " | " sprintf("%.2f", nm)
        for (i = 1; i <= nv; i++) {
          tk = v[i] SUBSEP p[k] SUBSEP s[j]
          if (!cnt[tk]) { print "vs-nccl-tests: " v[i] " has no row for " p[k] " " s[j] > "/dev/stderr"; line = line " | - | -"; bad = 1; continue }
          tm = median(tk); ratio = nm > 0 ? tm / nm : 0
          line = line " | " sprintf("%.2f", tm) " | " sprintf("%.2f", ratio)
          if (ratio > 0) { lsum[i] += log(ratio); lcount[i]++ }
        }
        print line " |"
      }
      line = "| " p[k] " | geomean | "
      for (i = 1; i <= nv; i++) line = line " | | " (lcount[i] ? sprintf("%.2f", exp(lsum[i] / lcount[i])) : "-")
      print line " |"
    }
    exit bad
  }' "$raw" | tee "$VS_OUT/table.md"
rc=${PIPESTATUS[0]}
echo "# busbw in GB/s (10^9 B/s), median of $ROUNDS rounds; ratio = tcpx-perf / nccl-tests (out-of-place); every round's figure in $raw"
exit $rc
