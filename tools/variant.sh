# Tuning variants, shared by tools/sweep.sh and tools/h200-gpu-tests.sh (source it).
# A variant is a word of comma-separated knobs; any left out take the defaults below:
#   nsocks=N     NCCL_NSOCKS_PERTHREAD (data sockets per comm; NCCL_SOCKET_NTHREADS=1)
#   cs=BYTES     NCCL_DYNAMIC_CHUNK_SIZE (bytes per socket chunk)
#   buf=BYTES    TCPXEMU_SOCKBUF (SO_SNDBUF/SO_RCVBUF of data sockets; 0 = kernel autotuning)
#   ch=N --channels     chunk=SIZE --chunk     win=N --window
#   bind=none|numa|core mpirun binding
#   zc=MODE      TCPXEMU_ZEROCOPY: off|staged|all (zero-copy sends; unset: the plugin's default)
VARIANT_KNOBS="nsocks cs buf ch chunk win bind zc"

# variant_parse WORD: sets the knobs, then variant_env (mpirun -x arguments), variant_binding
# (mpirun binding arguments), variant_args (tcpx-perf arguments) and variant_mpirun (the
# environment and mpirun with its binding, as a reader would type them). Returns 64 on an
# unknown knob.
variant_parse() {
  nsocks=8 cs=1048576 buf=4194304 ch=2 chunk=4M win=8 bind=none zc=
  local kv a
  IFS=, read -ra kv <<<"$1"
  for a in "${kv[@]}"; do
    case "${a%%=*}" in
      nsocks | cs | buf | ch | chunk | win | bind | zc) printf -v "${a%%=*}" '%s' "${a#*=}" ;;
      *) echo "variant: unknown knob '${a%%=*}' in '$1' ($VARIANT_KNOBS)" >&2; return 64 ;;
    esac
  done
  case "$bind" in
    none) variant_binding=(--bind-to none) ;;
    numa) variant_binding=(--map-by numa --bind-to numa) ;;
    core) variant_binding=(--map-by core --bind-to core) ;;
    *) echo "variant: bind=$bind in '$1' (none|numa|core)" >&2; return 64 ;;
  esac
  local env="NCCL_NSOCKS_PERTHREAD=$nsocks NCCL_SOCKET_NTHREADS=1 NCCL_DYNAMIC_CHUNK_SIZE=$cs TCPXEMU_SOCKBUF=$buf"
  case "$zc" in
    "") ;;
    off | staged | all | 0 | 1) env+=" TCPXEMU_ZEROCOPY=$zc" ;;
    *) echo "variant: zc=$zc in '$1' (off|staged|all)" >&2; return 64 ;;
  esac
  variant_env=()
  for a in $env; do variant_env+=(-x "$a"); done
  variant_args=(--chunk "$chunk" --window "$win" --channels "$ch")
  variant_mpirun="$env mpirun ${variant_binding[*]}"
}
