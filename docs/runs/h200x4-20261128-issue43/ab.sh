#!/usr/bin/env bash
# Issue 43: which side moved tcpx-perf's np 2 busbw (launch/vs-nccl-tests.sh's tcpx-perf call,
# ring and fullmesh, CUDA memory, -b 16M -e 1G -f 4 -n 10 -w 3): tcpx-perf before/after x the
# plugin file before/after, alternated for ROUNDS rounds (each round in a new order).
set -u
cd "$(dirname "$0")/../../.." || exit 1
FINAL=${OUT:-/tmp/out}; OUT=$FINAL/ab; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 \
  NCCL_SHM_DISABLE=1 NCCL_NET_GDR_LEVEL=SYS NCCL_DYNAMIC_CHUNK_SIZE=524288 NCCL_PROTO=Simple
source launch/mpirun-args.sh
echo "tool,plugin,pattern,round,size_bytes,busbw_gbps,cpu_s_per_gb" >"$OUT/raw.csv"
VARIANTS=${VARIANTS:-"before:before new:new new:before before:new"}
for r in $(seq 1 "${ROUNDS:-3}"); do
  order=$VARIANTS
  [ $((r % 2)) = 0 ] && order=$(echo "$VARIANTS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do
    t=${v%%:*} p=${v#*:}
    for pat in ${PATTERNS:-ring fullmesh}; do
      d=$OUT/r$r-$t-$p-$pat
      timeout -k 5 120 mpirun -np 2 "${MPIRUN_ARGS[@]}" -x NCCL_DYNAMIC_CHUNK_SIZE -x NCCL_NET_GDR_LEVEL \
        ".devcarry/$t/tcpx-perf" --pattern "$pat" -b 16M -e 1G -f 4 -n 10 -w 3 \
        --plugin ".devcarry/$p/libnccl_net_tcpxemu_v7.so" --out "$d" >"$d.log" 2>&1 || echo "run $d failed: $(tail -2 "$d.log")"
      awk -F, -v t="$t" -v p="$p" -v pat="$pat" -v r="$r" 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
        {print t "," p "," pat "," r "," $c["size_bytes"] "," $c["busbw_gbps"] "," $c["cpu_s_per_gb"]}' "$d/results.csv" >>"$OUT/raw.csv"
    done
  done
done
python3 - "$OUT/raw.csv" <<'P' | tee "$FINAL/ab-table.txt"
import csv, statistics, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(list); cpu = collections.defaultdict(list)
for r in rows:
    k = (r["pattern"], int(r["size_bytes"]), r["tool"], r["plugin"])
    by[k].append(float(r["busbw_gbps"])); cpu[k].append(float(r["cpu_s_per_gb"] or "nan"))
keys = sorted({(k[2], k[3]) for k in by})
print("pattern size " + " ".join(f"{t}+{p}-plugin" for t, p in keys) + "   (busbw GB/s median over rounds / cpu_s/GB)")
for pat in ("ring", "fullmesh"):
    for size in sorted({k[1] for k in by if k[0] == pat}):
        cells = [f"{statistics.median(by[(pat, size, t, p)]):.2f}/{statistics.median(cpu[(pat, size, t, p)]):.2f}" for t, p in keys]
        print(f"{pat} {size >> 20}M " + " ".join(cells))
P
tar -czf "$FINAL/issue43-ab.tgz" -C "$OUT" . && rm -rf "$OUT"
