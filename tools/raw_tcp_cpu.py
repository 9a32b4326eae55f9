#!/usr/bin/env python3
"""Raw TCP's CPU cost per byte: one stream, no framing, for comparison with tcpx-emu's cpu_s/GB.

    raw_tcp_cpu.py recv ADDR PORT          listen, take one connection, read it to its end
    raw_tcp_cpu.py send ADDR PORT BYTES    connect (retrying up to 10 s), send BYTES, close

Each side prints one JSON line: {"side", "bytes", "user_s", "sys_s", "wall_s"} (its own process's
CPU from getrusage). Buffers of 1 MiB, so Python's own work per byte is negligible next to the
kernel's; tools/scale-bench.sh runs the two ends in two rig namespaces and adds their CPU
(every byte is sent once and received once, as tcpx-perf's cpu_s/GB counts every rank).
Every wait has a deadline (60 s without progress); exit 1 with one line on any failure.
"""
import json
import resource
import socket
import sys
import time

CHUNK = 1 << 20
IDLE_S = 60.0


def report(side, moved, start):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"side": side, "bytes": moved, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                      "wall_s": time.monotonic() - start}), flush=True)


def recv(addr, port):
    with socket.create_server((addr, port)) as srv:
        srv.settimeout(IDLE_S)
        conn, _ = srv.accept()
    start = time.monotonic()
    buf = memoryview(bytearray(CHUNK))
    moved = 0
    with conn:
        conn.settimeout(IDLE_S)
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            moved += n
    report("recv", moved, start)


def send(addr, port, total):
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=IDLE_S)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    start = time.monotonic()
    data = memoryview(bytearray(CHUNK))
    moved = 0
    with conn:
        while moved < total:
            n = min(CHUNK, total - moved)
            conn.sendall(data[:n])
            moved += n
    report("send", moved, start)


def main(argv):
    try:
        if len(argv) == 4 and argv[1] == "recv":
            recv(argv[2], int(argv[3]))
        elif len(argv) == 5 and argv[1] == "send":
            send(argv[2], int(argv[3]), int(argv[4]))
        else:
            sys.exit("usage: raw_tcp_cpu.py recv ADDR PORT | send ADDR PORT BYTES")
    except (OSError, ValueError) as e:
        sys.exit(f"raw_tcp_cpu.py {argv[1] if len(argv) > 1 else ''}: {e}")


if __name__ == "__main__":
    main(sys.argv)
