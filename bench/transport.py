"""One ZeroMQ hop between two Python processes: requests of 1 KiB and 128 KiB (a batch of 128 x
1 KB), 4 in flight, over tcp:// loopback and ipc://; CPU per request on each side.

    uv run --frozen --all-packages python bench/transport.py [--runs 2] [--requests 20000]

What a hop costs before any Ferry code runs: the floor under every broker-internal and client
hop (docs/perf-notes/2026-11-25-log-file-pulls.md).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import Any

import zmq

IN_FLIGHT = 4


def serve(endpoint: str, requests: int, out: Any) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(endpoint)
    out.put(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    for _ in range(requests):
        frames = sock.recv_multipart()
        sock.send_multipart([frames[0], b"ok"])
    used = os.times()
    out.put(used.user + used.system)
    sock.close()
    ctx.term()


def hop(endpoint: str, size: int, requests: int) -> tuple[float, float, float]:
    """(requests/s, client CPU µs per request, server CPU µs per request)."""
    out: Any = mp.Queue()
    server = mp.Process(target=serve, args=(endpoint, requests, out))
    server.start()
    bound = out.get(timeout=30)
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(bound)
    payload = os.urandom(size)
    before, started = os.times(), time.perf_counter()
    sent = got = 0
    while got < requests:
        while sent < requests and sent - got < IN_FLIGHT:
            sock.send_multipart([b"header", payload])
            sent += 1
        sock.recv_multipart()
        got += 1
    wall = time.perf_counter() - started
    after = os.times()
    server_cpu = out.get(timeout=30)
    server.join()
    sock.close()
    ctx.term()
    client_cpu = after.user + after.system - before.user - before.system
    return requests / wall, client_cpu / requests * 1e6, server_cpu / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for run in range(args.runs):
            for size in (1024, 128 * 1024):
                for transport in ("tcp", "ipc"):
                    endpoint = (
                        "tcp://127.0.0.1:*"
                        if transport == "tcp"
                        else f"ipc://{run_dir}/hop-{run}-{size}.sock"
                    )
                    results.setdefault((transport, size), []).append(
                        hop(endpoint, size, args.requests)
                    )
    print(f"one hop, {IN_FLIGHT} in flight, {args.requests:,} requests x {args.runs} runs, medians")
    print("| transport | request | req/s | client CPU µs/req | server CPU µs/req |")
    print("|---|---|---|---|---|")
    for (transport, size), rows in results.items():
        rate, client, server = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"| {transport} | {size // 1024} KiB | {rate:,.0f} | {client:.1f} | {server:.1f} |")


if __name__ == "__main__":
    main()
