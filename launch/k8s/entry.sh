#!/usr/bin/env bash
# The tcpx-perf container's entry point in the pods launch/k8s/render.sh writes (mounted from the
# job's ConfigMap; its arguments are the mpirun line). Every pod: wait for RxDM's socket, start
# sshd on TCPX_PERF_SSH_PORT (hostNetwork: the node's own sshd has port 22). Pod 0 then waits
# until every pod of the hostfile answers ssh, runs the mpirun line (Open MPI starts the other
# pods' ranks over ssh, as Google's nccl-test samples do), tells the other pods to stop, and keeps
# the results (an emptyDir) until they are copied out with kubectl cp or TCPX_PERF_KEEP_S pass.
# The other pods wait for pod 0's word. Every wait has a deadline; exit status is mpirun's.
#
# Environment (render.sh sets it): TCPX_PERF_INDEX (this pod's index), TCPX_PERF_POD (its name),
# TCPX_PERF_HOSTFILE, TCPX_PERF_SSH_DIR (the Secret with id_ed25519 and id_ed25519.pub),
# TCPX_PERF_SSH_PORT, TCPX_PERF_WAIT_S (RxDM and peers), TCPX_PERF_DEADLINE_S (the whole job),
# TCPX_PERF_KEEP_S, TCPX_PERF_RESULTS, NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX (RxDM's sockets);
# TCPX_PERF_STATE (where pod 0's word lands, /tmp/tcpx-perf); TCPX_PERF_DRAIN_LIST (the
# --drain-list given to tcpx-perf, default $TCPX_PERF_RESULTS/drain.txt: read when it exits 5). ssh, sshd and ssh-keygen are found
# on PATH (tests/k8s.rs stands them in to run the whole flow on one machine).
set -uo pipefail

index=${TCPX_PERF_INDEX:?TCPX_PERF_INDEX is unset: run this from the manifests of launch/k8s/render.sh}
hostfile=${TCPX_PERF_HOSTFILE:-/etc/tcpx-perf/job/hostfile}
ssh_dir=${TCPX_PERF_SSH_DIR:-/etc/tcpx-perf/ssh}
port=${TCPX_PERF_SSH_PORT:-2222}
wait_s=${TCPX_PERF_WAIT_S:-600}
deadline_s=${TCPX_PERF_DEADLINE_S:-7200}
keep_s=${TCPX_PERF_KEEP_S:-3600}
results=${TCPX_PERF_RESULTS:-/opt/tcpx-perf/results}
rxdm=${NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX:-/run/tcpx}/rx_rule_manager
state=${TCPX_PERF_STATE:-/tmp/tcpx-perf}
mkdir -p "$state"

say() { echo "entry[$index]: $*" >&2; }

# Runs "$@" every second until it succeeds (0) or `limit` seconds pass (1).
wait_for() {
  local limit=$1
  shift
  local end=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 1
  done
}

# tcpgpudmarxd (the sidecar) creates its sockets once it has set up the NICs; tcpx-perf's preflight
# fails without them, so no rank starts before they exist on every pod.
if ! wait_for "$wait_s" test -S "$rxdm"; then
  say "RxDM socket $rxdm did not appear within ${wait_s}s: check the tcpx-daemon container's log (kubectl logs POD -c tcpx-daemon)"
  exit 1
fi

home=${HOME:-/root}
mkdir -p "$home/.ssh" /run/sshd
chmod 700 "$home/.ssh"
if [ ! -r "$ssh_dir/id_ed25519" ] || [ ! -r "$ssh_dir/id_ed25519.pub" ]; then
  say "no ssh key in $ssh_dir: create the Secret (docs/gke.md, step 3)"
  exit 1
fi
install -m 600 "$ssh_dir/id_ed25519" "$home/.ssh/id_ed25519"
install -m 600 "$ssh_dir/id_ed25519.pub" "$home/.ssh/authorized_keys"
cat >"$home/.ssh/config" <<EOF
Host *
  Port $port
  BatchMode yes
  ConnectTimeout 10
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
EOF
ssh-keygen -A >/dev/null
# sshd re-executes itself, so it wants its absolute path.
if ! "$(command -v sshd || echo /usr/sbin/sshd)" -p "$port" -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password; then
  say "sshd did not start on port $port (taken on this node? launch/k8s/render.sh --ssh-port picks another)"
  exit 1
fi

if [ "$index" != 0 ]; then
  say "ready; waiting up to ${deadline_s}s for pod 0 to finish"
  if wait_for "$deadline_s" test -e "$state/done"; then
    say "pod 0 is done"
    exit 0
  fi
  say "pod 0 did not finish within ${deadline_s}s"
  exit 1
fi

mapfile -t hosts < <(awk '!/^#/ && NF { print $1 }' "$hostfile")
# Tells every other pod that the job is over (best effort: a pod that is gone needs no word).
release() {
  local h
  for h in "${hosts[@]:1}"; do
    # shellcheck disable=SC2029 # $state is the same path on every pod: expanding it here is right
    ssh "$h" "touch $state/done" || say "could not tell $h to stop (it stops at its deadline)"
  done
}
for h in "${hosts[@]}"; do
  if ! wait_for "$wait_s" ssh "$h" true; then
    say "$h did not answer ssh on port $port within ${wait_s}s (pod not scheduled, or its DNS name unknown: kubectl get pods -o wide)"
    release
    exit 1
  fi
done
say "all ${#hosts[@]} pods answer; running: $*"
"$@"
rc=$?
say "mpirun exited with status $rc"
# Exit 5: a node is bad. With --drain-list (docs/drain.md), the lines that take each out of
# service; the node is its hostname, the Kubernetes node's name under hostNetwork.
if [ "$rc" -eq 5 ]; then
  drain=${TCPX_PERF_DRAIN_LIST:-$results/drain.txt}
  if [ -s "$drain" ]; then
    say "bad nodes in $drain; to take them out of service:"
    while read -r node reason; do
      say "  kubectl cordon $node && kubectl taint nodes $node tcpx-perf/verdict=bad:NoSchedule --overwrite"
      say "  kubectl annotate node $node tcpx-perf/reason=$(printf '%q' "${reason:0:200}") --overwrite"
    done <"$drain"
  else
    say "a node is bad (summary.json node_verdicts); pass --drain-list $drain to tcpx-perf for the list"
  fi
fi
release
pod=${TCPX_PERF_POD:-POD}
say "results are in $results; copy them out, then let this pod end:"
say "  kubectl cp -c tcpx-perf $pod:$results ./results/gke && kubectl exec $pod -c tcpx-perf -- touch $results/.collected"
if wait_for "$keep_s" test -e "$results/.collected"; then
  say "results collected"
else
  say "results not collected within ${keep_s}s; they go with this pod"
fi
exit "$rc"
