#!/usr/bin/env bash
# Every 10 s (or SECONDS) one line of the host's and the rig's counters while a run goes on:
# t softnet_dropped softnet_squeezed arp_unresolved_discards arp_table_fulls | sums over the
# nodes' namespaces of TcpExt ListenOverflows ListenDrops TCPSynRetrans TCPTimeouts
# TCPAbortOnTimeout, Tcp RetransSegs | tcpx-perf processes, their most threads and fds.
# Usage: sample.sh NODES RIG OUTFILE [SECONDS] (runs until killed)
NODES=$1 RIG=$2 OUT=$3 EVERY=${4:-10}
IP=${IP:-ip}
ns_of() { if [ "$RIG" = 0 ]; then echo "node$1"; else echo "r$RIG-node$1"; fi; }
start=$(date +%s)
while :; do
  soft=$(python3 -c 'import sys; r=[l.split() for l in open("/proc/net/softnet_stat")]; print(sum(int(x[1],16) for x in r), sum(int(x[2],16) for x in r))')
  arp=$(python3 -c 'r=[l.split() for l in open("/proc/net/stat/arp_cache")][1:]; print(sum(int(x[10],16) for x in r), sum(int(x[11],16) for x in r))')
  tcp=$(for n in $(seq 0 $((NODES - 1))); do "$IP" netns exec "$(ns_of "$n")" cat /proc/net/netstat /proc/net/snmp; done |
    awk '/^TcpExt:/ { if (!h) { for (i = 2; i <= NF; i++) k[i] = $i; h = 1 } else { for (i = 2; i <= NF; i++) v[k[i]] += $i; h = 0 } }
         /^Tcp:/ { if (!t) { for (i = 2; i <= NF; i++) q[i] = $i; t = 1 } else { for (i = 2; i <= NF; i++) v[q[i]] += $i; t = 0 } }
         END { print v["ListenOverflows"]+0, v["ListenDrops"]+0, v["TCPSynRetrans"]+0, v["TCPTimeouts"]+0, v["TCPAbortOnTimeout"]+0, v["RetransSegs"]+0 }')
  procs=$(pgrep -x tcpx-perf | head -600)
  tf=$(for p in $procs; do echo "$(awk '/^Threads:/ {print $2}' /proc/$p/status 2>/dev/null) $(ls /proc/$p/fd 2>/dev/null | wc -l)"; done |
    awk '{n++; if ($1 > t) t = $1; if ($2 > f) f = $2} END {print n+0, t+0, f+0}')
  echo "$(( $(date +%s) - start )) soft $soft arp $arp tcp $tcp procs $tf" >>"$OUT"
  sleep "$EVERY"
done
