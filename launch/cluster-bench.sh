#!/usr/bin/env bash
# Speed against the rig's physical limit: a rig of N nodes x K NICs, every NIC's egress shaped to
# RATE, one rank per NIC, a bidirectional run at 64 MiB and up; prints the job's network payload
# bytes per second against N x K x RATE (the shaping counts Ethernet, IP and TCP headers, so
# 1.0 is out of reach: the header-bound ceiling is printed beside it). docs/cluster.md.
#
#   launch/cluster-bench.sh [--nodes 2] [--nics 2] [--rate 400mbit] [--mtu 1500]
#                           [--pattern pairs] [-- more tcpx-perf args]
#
# The rig is CLUSTER_RIG (default 14), brought up here and torn down at the end (only when this
# script brought it up: a rig id already in use is refused, and left as it is). Exit 77 where no
# rig can exist (see launch/cluster.sh), 1 when the run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_RIG=${CLUSTER_RIG:-14}
nodes=2 nics=2 rate=400mbit mtu=1500 pattern=pairs
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:?}; shift 2 ;;
    --nics) nics=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --mtu) mtu=${2:?}; shift 2 ;;
    --pattern) pattern=${2:?}; shift 2 ;;
    --) shift; break ;;
    *) echo "cluster-bench.sh: unknown argument '$1' (see the top of launch/cluster-bench.sh)" >&2; exit 1 ;;
  esac
done
[ "$rate" != off ] || { echo "cluster-bench.sh: --rate off has no limit to compare with; give e.g. 400mbit" >&2; exit 1; }

out=$(mktemp -d /tmp/cluster-bench.XXXXXX)
rig_up=0
cleanup() {
  [ "$rig_up" -eq 0 ] || bash launch/cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
set +e
bash launch/cluster.sh up --nodes "$nodes" --nics "$nics" --rate "$rate" --mtu "$mtu"
status=$?
set -e
[ "$status" -eq 0 ] || exit "$status"
rig_up=1

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_DYNAMIC_CHUNK_SIZE=${NCCL_DYNAMIC_CHUNK_SIZE:-524288}
np=$((nodes * nics))
cmd=(bash launch/cluster.sh run -np "$np" -- --pattern "$pattern" -b 64M -e 128M -f 2 -n 5 -w 1 -T 120
  --out "$out/run" "$@")
echo "cluster-bench.sh: CLUSTER_RIG=$CLUSTER_RIG ${cmd[*]}"
"${cmd[@]}" >"$out/log" 2>&1 || {
  tail -20 "$out/log" >&2
  echo "cluster-bench.sh: the run failed (log above)" >&2
  exit 1
}

python3 - "$out/run/results.csv" "$nodes" "$nics" "$rate" "$mtu" <<'EOF'
import csv, re, sys
path, nodes, nics, rate, mtu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].lower(), int(sys.argv[5])
num, unit = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate).groups()
bits = int(num) * {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[unit]
limit = nodes * nics * bits / 8
# Payload per Ethernet frame of a full-sized TCP segment (IPv4 20 B, TCP 20 B + 12 B timestamps,
# Ethernet header 14 B; tbf counts no preamble or FCS).
ceiling = (mtu - 52) / (mtu + 14)
print(f"limit: {nodes} nodes x {nics} NICs x {rate} = {limit / 1e9:.4f} GB/s on the wire; "
      f"payload ceiling at MTU {mtu}: {ceiling:.3f} of it")
print(f"{'size':>12} {'payload GB/s':>13} {'ratio':>7} {'of ceiling':>11}  per-NIC rx bytes")
worst = None
for r in csv.DictReader(open(path)):
    rate_bps = int(r["bytes_planned"]) / (float(r["time_us"]) / 1e6)
    ratio = rate_bps / limit
    worst = ratio if worst is None else min(worst, ratio)
    per_nic = ";".join(f"{k}={v.split('/')[0]}" for k, v in (w.split("=") for w in r["wire_by_iface"].split(";")))
    print(f"{r['size_bytes']:>12} {rate_bps / 1e9:>13.4f} {ratio:>7.3f} {ratio / ceiling:>11.3f}  {per_nic}")
verdict = "meets" if worst >= 0.9 else "is below"
print(f"ratio at 64 MiB and up: {worst:.3f} (network payload bytes/s / (N x K x RATE)); {verdict} the 0.9 target")
EOF
