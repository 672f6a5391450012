#!/usr/bin/python3
"""Loopback TCP throughput of this machine: the ceiling under every pshard and
PyTorch step time measured on one host.

Two processes on 127.0.0.1, 4 MiB sendall/recv_into calls (so Python's
overhead is negligible next to the kernel's copies):
  one_way   one process sends, the other receives;
  both_ways both send and receive at once, as two ranks exchanging buckets
            do (each direction's GB/s is reported).
With two cores the kernel's copies on both ends compete for the same CPUs, so
both_ways gives less per direction than one_way.

    /usr/bin/python3 bench/step/loopback_tcp.py [--mib 1024] [--json]
"""
import argparse
import json
import multiprocessing as mp
import socket
import sys
import threading
import time

CHUNK = 4 << 20


def recv_all(conn, total):
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    got = 0
    while got < total:
        n = conn.recv_into(view, min(CHUNK, total - got))
        if n == 0:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, total))
        got += n


def send_all(conn, total):
    data = bytes(CHUNK)
    sent = 0
    while sent < total:
        n = min(CHUNK, total - sent)
        conn.sendall(memoryview(data)[:n])
        sent += n


def connect(role, port_queue):
    if role == 0:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port_queue.put(server.getsockname()[1])
        conn, _ = server.accept()
        server.close()
    else:
        conn = socket.create_connection(("127.0.0.1", port_queue.get(timeout=30)))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def endpoint(mode, role, total, port_queue, results):
    conn = connect(role, port_queue)
    # A short exchange first, so both ends start together.
    conn.sendall(b"x")
    if conn.recv(1) != b"x":
        raise ConnectionError("handshake failed")
    start = time.perf_counter()
    if mode == "one_way":
        if role == 0:
            recv_all(conn, total)
        else:
            send_all(conn, total)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)  # wait for the receiver to close
    else:
        sender = threading.Thread(target=send_all, args=(conn, total))
        sender.start()
        recv_all(conn, total)
        sender.join()
    results.put((role, time.perf_counter() - start))
    conn.close()


def measure(mode, total):
    ctx = mp.get_context("fork")
    port_queue, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=endpoint, args=(mode, r, total, port_queue, results))
             for r in (0, 1)]
    for p in procs:
        p.start()
    times = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    # The receiver's time (one_way), or the slower end (both_ways).
    seconds = times[0] if mode == "one_way" else max(times.values())
    return total / seconds / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="MiB per direction")
    parser.add_argument("--repetitions", type=int, default=3, help="best of")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    total = args.mib << 20
    result = {"mib": args.mib}
    for mode in ("one_way", "both_ways"):
        result[mode + "_GBps"] = max(measure(mode, total) for _ in range(args.repetitions))
    if args.json:
        print(json.dumps(result))
    else:
        print("loopback TCP, %d MiB per direction, best of %d: one way %.2f GB/s, "
              "both ways at once %.2f GB/s per direction" % (
                  args.mib, args.repetitions, result["one_way_GBps"], result["both_ways_GBps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
