"""The TCP door (ferry.runtime.tcp_door) against the ZeroMQ ROUTER of the same Service loop.

One server process runs a Service with a ROUTER (Ping) and a door whose handler echoes every
frame. Measured from a client process, one connection each:
- door ping-pong: one 200-byte frame in flight, round trips/s and p50 µs;
- door pipelined: 100 frames of 200 bytes in flight, frames/s;
- ZeroMQ ping-pong: a PingRequest to the same loop, round trips/s and p50 µs (the hot path the
  door's poller changes must not slow down; `--zmq-only` runs it without the door).

    uv run --frozen --all-packages python bench/tcp_door.py [--samples 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import socket
import statistics
import struct
import time
from typing import Any

import zmq

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import PingRequest

FRAME = 200
IN_FLIGHT = 100


def serve(out: Any, with_door: bool) -> None:
    from ferry.runtime.service import Service

    service = Service("bench")
    endpoint = service.bind_router("tcp://127.0.0.1:0")
    door_address = ""
    if with_door:
        from ferry.runtime.tcp_door import Connection, TcpDoor

        def echo(conn: Connection, frame: bytes) -> None:
            conn.send_frame(frame)

        door = TcpDoor(service, "127.0.0.1", 0, echo)
        door_address = f"{door.host}:{door.port}"
    out.put((endpoint, door_address))
    service.run()


def p50_and_rate(samples: list[float], wall: float) -> tuple[float, float]:
    return statistics.median(samples) * 1e6, len(samples) / wall


def door_ping_pong(address: str, samples: int) -> tuple[float, float]:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = struct.pack(">I", FRAME) + bytes(FRAME)
    reply = bytearray(len(request))
    view = memoryview(reply)
    times = []
    started = time.perf_counter()
    for _ in range(samples):
        t0 = time.perf_counter()
        sock.sendall(request)
        got = 0
        while got < len(reply):
            got += sock.recv_into(view[got:])
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    sock.close()
    return p50_and_rate(times, wall)


def door_pipelined(address: str, frames: int) -> float:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    one = struct.pack(">I", FRAME) + bytes(FRAME)
    buf = bytearray(1 << 20)
    started = time.perf_counter()
    sent = min(frames, IN_FLIGHT)
    sock.sendall(one * sent)
    got_bytes = 0
    while got_bytes < frames * len(one):
        before = got_bytes // len(one)
        got_bytes += sock.recv_into(buf)
        done = got_bytes // len(one) - before
        more = min(done, frames - sent)
        if more:
            sock.sendall(one * more)
            sent += more
    wall = time.perf_counter() - started
    sock.close()
    return frames / wall


def zmq_ping_pong(endpoint: str, samples: int) -> tuple[float, float]:
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    codec = RequestCodec()
    ids = itertools.count(1)
    times = []
    started = time.perf_counter()
    for _ in range(samples):
        t0 = time.perf_counter()
        sock.send_multipart(codec.request_frames(RequestEnvelope(next(ids), PingRequest())))
        sock.recv_multipart()
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    sock.close()
    ctx.term()
    return p50_and_rate(times, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--zmq-only", action="store_true")
    args = parser.parse_args()
    out: Any = mp.Queue()
    server = mp.Process(target=serve, args=(out, not args.zmq_only), daemon=True)
    server.start()
    try:
        endpoint, door_address = out.get(timeout=30)
        zmq_ping_pong(endpoint, 1000)  # warm-up
        rows: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.runs):
            rows.setdefault("zmq ping-pong", []).append(zmq_ping_pong(endpoint, args.samples))
            if door_address:
                door_ping_pong(door_address, 1000)
                rows.setdefault("door ping-pong", []).append(
                    door_ping_pong(door_address, args.samples)
                )
                rate = door_pipelined(door_address, args.samples * 5)
                rows.setdefault("door pipelined x100", []).append((0.0, rate))
        print(f"{'':24} {'p50 µs':>16} {'per second':>22}   (median, min-max of {args.runs})")
        for name, runs in rows.items():
            p50s = [r[0] for r in runs]
            rates = [r[1] for r in runs]
            p50 = (
                f"{statistics.median(p50s):.0f} ({min(p50s):.0f}-{max(p50s):.0f})"
                if any(p50s)
                else "-"
            )
            per_s = f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
            print(f"{name:24} {p50:>16} {per_s:>22}")
    finally:
        server.terminate()
        server.join(10)


if __name__ == "__main__":
    main()
