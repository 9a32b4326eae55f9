#!/usr/bin/env python3
"""NCCL's own socket transport, measured in the same call as tcpx-perf: one rank of the run.

Started by tools/nccl-socket-bench.sh through torchrun (one process per GPU), with NCCL's Socket
transport forced (NCCL_NET=Socket, P2P and SHM off), so the baseline comes from the same machine,
at the same time, as the tcpx-perf figures it is compared with (the test host's machines differ
by tens of percent from one loan to the next; a fixed number cannot account for that).

Patterns (sizes in bytes per rank, as nccl-tests counts them):
  sendrecv  rank r sends `size` bytes to r+1 and receives from r-1 (nccl-tests sendrecv_perf;
            busbw = algbw)
  alltoall  every rank sends size/n bytes to every rank (nccl-tests alltoall_perf;
            busbw = algbw * (n-1)/n)

Timing, both per size (`--timing`):
  batch     nccl-tests' method: `iters` operations back to back, one clock around all of them,
            time = total / iters (per-iteration samples are CUDA-event intervals between them)
  barrier   tcpx-perf's method: a barrier, then one operation timed alone, `iters` times
Each rank's time is averaged over ranks (nccl-tests' default `-a 1`, tcpx-perf's `avg`).

The data are checked once per size, after the timed iterations: every received element must
equal what its sender wrote (a pattern of sender, receiver and index). A wrong element fails the
run (exit 1).

Rank 0 writes an nccl-tests-like table to stdout and, with `--json`, nccl-tests JSON (version 3,
out-of-place only, with per-iteration samples) that `tcpx-analyze compare` reads as a baseline.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def say(line):
    """One write(2) per line: ranks share stdout."""
    os.write(1, (line + "\n").encode())


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    if t and t[-1] in units:
        return int(t[:-1]) * units[t[-1]]
    return int(t)


def pattern(src: int, dst: int, n: int, dev) -> torch.Tensor:
    """What rank `src` sends to rank `dst`: n int32 values, distinct per pair and index."""
    idx = torch.arange(n, dtype=torch.int64, device=dev)
    return ((idx * 2654435761 + src * 1000003 + dst * 7919 + 12345) % 2147483647).to(torch.int32)


class Pattern:
    """Buffers and one operation of a pattern at one size."""

    def __init__(self, name: str, size: int, rank: int, world: int, dev):
        self.name, self.rank, self.world = name, rank, world
        if name == "alltoall":
            per_peer = size // world // 4
            self.send = torch.cat([pattern(rank, d, per_peer, dev) for d in range(world)])
            self.recv = torch.empty_like(self.send)
            self.expect = torch.cat([pattern(s, rank, per_peer, dev) for s in range(world)])
            self.busbw_factor = (world - 1) / world
        else:
            n = size // 4
            self.to, self.frm = (rank + 1) % world, (rank - 1) % world
            self.send = pattern(rank, self.to, n, dev)
            self.recv = torch.empty_like(self.send)
            self.expect = pattern(self.frm, rank, n, dev)
            self.busbw_factor = 1.0

    def run(self):
        if self.name == "alltoall":
            dist.all_to_all_single(self.recv, self.send)
        else:
            ops = [dist.P2POp(dist.isend, self.send, self.to), dist.P2POp(dist.irecv, self.recv, self.frm)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    def wrong(self) -> int:
        return int((self.recv != self.expect).sum().item())


def mean_over_ranks(values, world, dev):
    t = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(t)
    return (t / world).tolist()


def measure(p: Pattern, timing: str, iters: int, warmup: int, dev):
    """Per-iteration times in microseconds (this rank's) and the mean (this rank's)."""
    for _ in range(warmup):
        p.run()
    torch.cuda.synchronize()
    if timing == "batch":
        events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        dist.barrier(device_ids=[dev.index])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        events[0].record()
        for i in range(iters):
            p.run()
            events[i + 1].record()
        torch.cuda.synchronize()
        total_us = (time.perf_counter() - t0) * 1e6
        samples = [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(iters)]
        return samples, total_us / iters
    samples = []
    for _ in range(iters):
        dist.barrier(device_ids=[dev.index])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        p.run()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples, sum(samples) / len(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pattern", choices=["sendrecv", "alltoall"], required=True)
    ap.add_argument("--timing", choices=["batch", "barrier"], default="batch")
    ap.add_argument("-b", "--minbytes", default="1M")
    ap.add_argument("-e", "--maxbytes", default="1G")
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--json", help="write nccl-tests JSON (version 3) here (rank 0)")
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    sizes, s = [], parse_size(args.minbytes)
    while s <= parse_size(args.maxbytes):
        sizes.append(s)
        s *= max(args.stepfactor, 2)
    name = f"{args.pattern}_perf"
    if rank == 0:
        say(f"# nccl-socket-bench: {name}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {world} ranks, "
            f"timing {args.timing}, -n {args.iters} -w {args.warmup}; GB = 1e9 bytes")
        say(f"# env: {' '.join(sorted(f'{k}={v}' for k, v in os.environ.items() if k.startswith('NCCL_')))}")
        say(f"# {'size':>12} {'count':>12} {'time(us)':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>7}")
    results, failed = [], False
    for size in sizes:
        if size % (4 * world):
            continue
        p = Pattern(args.pattern, size, rank, world, dev)
        mine, mean_us = measure(p, args.timing, args.iters, args.warmup, dev)
        torch.cuda.synchronize()
        wrong = torch.tensor([p.wrong()], dtype=torch.int64, device=dev)
        dist.all_reduce(wrong)
        times = mean_over_ranks(mine, world, dev)
        mean = mean_over_ranks([mean_us], world, dev)[0]
        nwrong = int(wrong.item())
        failed |= nwrong != 0
        if rank == 0:
            algbw = size / mean / 1e3
            busbw = algbw * p.busbw_factor
            say(f"  {size:>12} {size // 4:>12} {mean:>10.1f} {algbw:>7.2f} {busbw:>7.2f} {nwrong:>7}")
            results.append({
                "size": size, "count": size // 4, "type": "int32", "redop": "none", "root": -1,
                "out_of_place": {"time": mean, "alg_bw": algbw, "bus_bw": busbw, "nwrong": float(nwrong)},
                "out_of_place_per_iter": {"times_us": times},
            })
        del p
    if rank == 0:
        say(f"# Out of bounds values : {sum(int(r['out_of_place']['nwrong']) for r in results)} "
            f"{'FAILED' if failed else 'OK'}")
        if args.json:
            doc = {
                "version": 3,
                "start_time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                "args": [name, "--timing", args.timing, "-n", str(args.iters), "-w", str(args.warmup)],
                "env": sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("NCCL_")),
                "tool": "tcpx-perf tools/nccl_socket_bench.py (torch.distributed, NCCL backend)",
                "results": results,
            }
            with open(args.json + ".tmp", "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(args.json + ".tmp", args.json)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
