#!/usr/bin/env bash
# Every rig node gets a permanent neighbour entry for every other node on each rail and on the
# management bridge (ip -batch per namespace): no ARP at all, as on a cloud VPC where the host
# answers ARP. Usage: static-neigh.sh NODES NICS [RIG]
set -euo pipefail
NODES=$1 NICS=$2 RIG=${3:-${CLUSTER_RIG:-0}}
IP=${IP:-ip}
ns_of() { if [ "$RIG" = 0 ]; then echo "node$1"; else echo "r$RIG-node$1"; fi; }
declare -A mac
for n in $(seq 0 $((NODES - 1))); do
  for r in $(seq 0 "$NICS"); do
    mac[$n.$r]=$("$IP" -n "$(ns_of "$n")" -o link show "eth$r" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
  done
done
for n in $(seq 0 $((NODES - 1))); do
  batch=$(mktemp)
  for m in $(seq 0 $((NODES - 1))); do
    [ "$m" = "$n" ] && continue
    echo "neigh replace 198.19.$RIG.$((m + 1)) lladdr ${mac[$m.0]} dev eth0 nud permanent" >>"$batch"
    for r in $(seq 1 "$NICS"); do
      echo "neigh replace 198.18.$((16 * RIG + r)).$((m + 1)) lladdr ${mac[$m.$r]} dev eth$r nud permanent" >>"$batch"
    done
  done
  "$IP" -n "$(ns_of "$n")" -batch "$batch"
  rm -f "$batch"
done
echo "static-neigh: $NODES nodes x $((NICS + 1)) links: $((NODES * (NODES - 1) * (NICS + 1))) permanent entries"
