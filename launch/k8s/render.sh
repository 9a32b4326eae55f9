#!/usr/bin/env bash
# Kubernetes manifests for tcpx-perf on N GKE A3-high nodes over GPUDirect-TCPX:
#   launch/k8s/render.sh --nodes 2 --image REGISTRY/tcpx-perf:TAG | kubectl apply -f -
#   launch/k8s/render.sh --nodes 16 --form pods --out build/k8s -- --pattern ring -b 1M -e 1G
# One pod per node (hostNetwork, all 8 GPUs), tcpgpudmarxd beside it, TCPX's plugin copied from
# Google's plugin image; pod 0 runs the same mpirun line as launch/a3-high.sh over ssh to the
# others. TCPX's environment and tcpx-perf's TCPX flags come from launch/tcpx-env.sh, as for
# a3-high.sh (TCPX_LIB and PLUGIN override the same way). How to run it: docs/gke.md.
#
#   --nodes N         nodes (pods), 8 ranks each (required)
#   --form F          jobset (default: a JobSet, jobset.x-k8s.io/v1alpha2) or pods (bare Pods and
#                     a headless Service, for clusters without the JobSet controller)
#   --image IMG       the tcpx-perf image (launch/k8s/Dockerfile; default tcpx-perf:dev)
#   --name NAME       name of every object, and the pods' DNS names (default tcpx-perf)
#   --out DIR         write DIR/NAME.yaml instead of printing to stdout
#   --queue Q         Kueue LocalQueue (label kueue.x-k8s.io/queue-name; JobSet form only; a
#                     Kubernetes label value: at most 63 of A-Za-z0-9-_. , alphanumeric ends)
#   --deadline S      seconds the whole job may run, results' copying included
#                     (activeDeadlineSeconds; default 7200)
#   --ssh-port P      the port of the pods' sshd, on the node's network (default 2222)
#   --plugin-image I, --rxdm-image I   TCPX's plugin and RxDM images (a matched pair)
#   -- ARGS           tcpx-perf arguments, after TCPX_PERF_ARGS (as a3-high.sh's)
# Output depends only on the arguments and the files of launch/: no time, no randomness.
# Bad input: one line on stderr and exit 64. A manifest that cannot be written whole (a full
# disk, a link at --out's file): one line on stderr and exit 1, no file and no temporary left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# One line whatever the values it quotes hold: a line break shows as \n, a carriage return as \r.
usage() {
  local msg=${1//$'\n'/\\n}
  msg=${msg//$'\r'/\\r}
  echo "render.sh: $msg (usage: launch/k8s/render.sh --nodes N [--form jobset|pods] [--image IMG] [--out DIR] [-- tcpx-perf args])" >&2
  exit 64
}

nodes="" form=jobset image=tcpx-perf:dev name=tcpx-perf out="" queue="" deadline=7200 ssh_port=2222
# The pair Google released together (container-engine-accelerators gpudirect-tcpx/README.md,
# "Feb 15, 2024": plugin v3.1.9 with tcpgpudmarxd-dev v2.0.12; the daemon's version "is coupled
# with the NCCL plugin installer version"); nccl-test-latest.yaml runs the same pair.
plugin_image=us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9
rxdm_image=us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -h|--help) sed -n '2,/^# Bad input/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --nodes|--form|--image|--name|--out|--queue|--deadline|--ssh-port|--plugin-image|--rxdm-image)
      [ $# -ge 2 ] || usage "$1 needs a value"
      v=$2
      case "$1" in
        --nodes) nodes=$v ;; --form) form=$v ;; --image) image=$v ;; --name) name=$v ;;
        --out) out=$v ;; --queue) queue=$v ;; --deadline) deadline=$v ;; --ssh-port) ssh_port=$v ;;
        --plugin-image) plugin_image=$v ;; --rxdm-image) rxdm_image=$v ;;
      esac
      shift 2 ;;
    *) usage "unknown argument '$1' (tcpx-perf's own flags go after --)" ;;
  esac
done
[ -n "$nodes" ] || usage "--nodes is required"
[[ "$nodes" =~ ^[1-9][0-9]{0,3}$ ]] || usage "--nodes '$nodes' is not a node count from 1 to 9999"
[[ "$deadline" =~ ^[1-9][0-9]{0,6}$ ]] || usage "--deadline '$deadline' is not a number of seconds"
if ! [[ "$ssh_port" =~ ^[1-9][0-9]{0,4}$ ]] || [ "$ssh_port" -gt 65535 ]; then
  usage "--ssh-port '$ssh_port' is not a port number from 1 to 65535"
fi
case "$form" in jobset|pods) ;; *) usage "--form '$form' is neither jobset nor pods" ;; esac
# Pod hostnames are DNS labels of at most 63 characters: NAME-node-0-9999 must fit.
[[ "$name" =~ ^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$ ]] ||
  usage "--name '$name' is not a DNS label of at most 40 characters (a-z, 0-9, '-')"
[ -z "$queue" ] || [ "$form" = jobset ] || usage "--queue needs --form jobset (Kueue admits the JobSet)"
for img in "$image" "$plugin_image" "$rxdm_image"; do
  [[ "$img" =~ ^[^[:space:]]+$ ]] || usage "image '$img' is empty or has spaces"
done

# TCPX's environment, as a3-high.sh takes it: the container's own LD_LIBRARY_PATH, not this
# shell's, so that the output does not depend on who renders it.
unset LD_LIBRARY_PATH
# shellcheck source=launch/tcpx-env.sh
source "$root/launch/tcpx-env.sh"
prefix=""
for kv in "${TCPX_ENV[@]}"; do
  [ "${kv%%=*}" = NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX ] && prefix=${kv#*=}
done
[ -n "$prefix" ] || { echo "render.sh: launch/tcpx-env.sh sets no NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX (where RxDM's sockets go)" >&2; exit 1; }

# The pods' DNS names, 8 slots each: the JobSet controller names an Indexed Job's pods
# <jobset>-<replicatedJob>-<jobIndex>-<podIndex> under the subdomain <jobset> (JobSet CRD,
# spec.network.enableDNSHostnames); the pods form sets hostname NAME-i and subdomain NAME itself.
hostfile_path=/etc/tcpx-perf/job/hostfile
hosts=()
for ((i = 0; i < nodes; i++)); do
  if [ "$form" = jobset ]; then hosts+=("$name-node-0-$i.$name"); else hosts+=("$name-$i.$name"); fi
done
# The mpirun line of launch/a3-high.sh with HOSTFILE and RANKS of this job (tests/k8s.rs holds the
# two equal): MPI on eth0, every TCPX variable exported to every rank.
exports=(-x PATH -x LD_LIBRARY_PATH="$TCPX_LD_LIBRARY_PATH")
for kv in "${TCPX_ENV[@]}"; do exports+=(-x "$kv"); done
launch=(mpirun --allow-run-as-root -np "$((nodes * 8))" -hostfile "$hostfile_path" --map-by ppr:8:node
  --mca btl "tcp,self" --mca btl_tcp_if_include eth0
  "${exports[@]}"
  target/release/tcpx-perf "${TCPX_PERF_ARGS[@]}" "$@")

command -v python3 >/dev/null 2>&1 || { echo "render.sh: python3 is needed to write the YAML (apt-get install python3)" >&2; exit 1; }
# --flag=VALUE: a value that begins with '-' stays a value (and is judged by manifests.py).
args=(--form="$form" --nodes="$nodes" --name="$name" --image="$image" --queue="$queue"
  --deadline="$deadline" --ssh-port="$ssh_port" --plugin-image="$plugin_image" --rxdm-image="$rxdm_image"
  --tcpx-lib="$TCPX_LIB" --plugin="$PLUGIN" --uds="$prefix" --ld-library-path="$TCPX_LD_LIBRARY_PATH"
  --hostfile-path="$hostfile_path" --entry="$here/entry.sh")
for kv in "${TCPX_ENV[@]}"; do args+=(--env="$kv"); done
for h in "${hosts[@]}"; do args+=(--host="$h"); done
if [ -z "$out" ]; then
  python3 "$here/manifests.py" "${args[@]}" -- "${launch[@]}"
else
  mkdir -p "$out"
  # manifests.py writes the file whole or not at all (temporary, checked writes, fsync, read
  # back, rename), never through a link; on failure one line and exit 1, nothing left behind.
  python3 "$here/manifests.py" "${args[@]}" --out="$out/$name.yaml" -- "${launch[@]}"
  echo "render.sh: wrote $out/$name.yaml ($form, $nodes nodes, $((nodes * 8)) ranks)"
fi
