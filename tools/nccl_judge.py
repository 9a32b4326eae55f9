#!/usr/bin/env python3
"""NCCL as the judge of tcpx-emu's device-unpack emulation: one rank of the check.

Started by tools/nccl-judge.sh through torchrun (one process per GPU). NCCL runs on the
tcpx-emu plugin (NCCL_NET_PLUGIN / NCCL_NET=tcpx-emu, P2P and SHM off, NCCL_PROTO=Simple), so
every byte between GPUs goes through the plugin, and received bytes reach NCCL's buffers only
through NCCL's own device-unpack kernel reading the plugin's netUnpackMeta descriptors.

Cases (exact integer data, every element checked on the GPU):
  sendrecv  ring exchange (rank r sends to r+1, receives from r-1), several sizes
  allreduce sum, several sizes
Prints one line per case and rank: `JUDGE rank=R case=NAME PASS|FAIL detail`, plus a PERF line,
and exits non-zero when any case fails.
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def say(line):
    """One write(2) per line: ranks share stdout, and a single small write is not interleaved."""
    os.write(1, (line + "\n").encode())

SENDRECV_BYTES = [4, 4096 + 12, 1 << 20, (5 << 20) + 4, 64 << 20]
ALLREDUCE_ELEMS = [1, 1000, 1 << 20, (1 << 20) + 3, 16 << 20]
PERF_BYTES = 256 << 20


def pattern(owner: int, n: int, dev) -> torch.Tensor:
    idx = torch.arange(n, dtype=torch.int64, device=dev)
    return ((idx * 2654435761 + owner * 1000003 + 12345) % 2147483647).to(torch.int32)


def gdr_attribute(ordinal: int) -> str:
    """CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (NCCL enables GDR only when it is 1)."""
    try:
        import ctypes

        cuda = ctypes.CDLL("libcuda.so.1")
        dev, val = ctypes.c_int(), ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return "?"
        if cuda.cuDeviceGetAttribute(ctypes.byref(val), 116, dev) != 0:
            return "?"
        return str(val.value)
    except OSError as e:
        return f"? ({e})"


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    if rank == 0:
        print(f"JUDGE info torch {torch.__version__} nccl {torch.cuda.nccl.version()} world {world} "
              f"gpu {torch.cuda.get_device_name(dev)} gdr-attr {gdr_attribute(local)}", flush=True)
    ok_all = True

    def report(name: str, ok: bool, detail: str) -> None:
        nonlocal ok_all
        ok_all = ok_all and ok
        say(f"JUDGE rank={rank} case={name} {'PASS' if ok else 'FAIL'} {detail}")

    to, frm = (rank + 1) % world, (rank - 1) % world
    for nbytes in SENDRECV_BYTES:
        n = max(1, nbytes // 4)
        name = f"sendrecv-{n * 4}B"
        try:
            send = pattern(rank, n, dev)
            recv = torch.full((n,), -1, dtype=torch.int32, device=dev)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)])
            for r in reqs:
                r.wait()
            torch.cuda.synchronize()
            bad = int((recv != pattern(frm, n, dev)).sum().item())
            first = ""
            if bad:
                pos = int(torch.nonzero(recv != pattern(frm, n, dev))[0].item())
                first = f" first bad element {pos} (byte {pos * 4})"
            report(name, bad == 0, f"from rank {frm}: {bad} of {n} int32 wrong{first}")
        except Exception as e:  # noqa: BLE001 - report and go on
            report(name, False, f"exception: {e!r}")

    for n in ALLREDUCE_ELEMS:
        name = f"allreduce-{n * 4}B"
        try:
            idx = torch.arange(n, dtype=torch.int64, device=dev)
            x = ((idx % 1009) * (rank + 1) + rank).to(torch.float32)
            dist.all_reduce(x)
            torch.cuda.synchronize()
            ranks = torch.arange(world, dtype=torch.int64)
            exp = ((idx % 1009) * int((ranks + 1).sum()) + int(ranks.sum())).to(torch.float32)
            bad = int((x != exp).sum().item())
            report(name, bad == 0, f"{bad} of {n} float32 wrong (sum over {world} ranks)")
        except Exception as e:  # noqa: BLE001
            report(name, False, f"exception: {e!r}")

    # A throughput figure (not a pass criterion): ring sendrecv of 256 MiB per rank.
    try:
        n = PERF_BYTES // 4
        send = pattern(rank, n, dev)
        recv = torch.empty(n, dtype=torch.int32, device=dev)
        for it in range(4):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)])
            for r in reqs:
                r.wait()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        ok = bool((recv == pattern(frm, n, dev)).all().item())
        print(f"JUDGE rank={rank} PERF sendrecv {PERF_BYTES >> 20} MiB: {PERF_BYTES / dt / 1e9:.2f} GB/s per rank "
              f"(last of 4), data {'ok' if ok else 'WRONG'}", flush=True)
        t = torch.ones(PERF_BYTES // 4, dtype=torch.float32, device=dev)
        for it in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        busbw = PERF_BYTES * 2 * (world - 1) / world / dt / 1e9
        say(f"JUDGE rank={rank} PERF allreduce {PERF_BYTES >> 20} MiB: {dt * 1e3:.1f} ms, busbw {busbw:.2f} GB/s")
    except Exception as e:  # noqa: BLE001
        say(f"JUDGE rank={rank} PERF failed: {e!r}")

    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
