"""What one round trip costs on this machine, hop by hop: the floor under sync-send and
end-to-end latency (docs/perf-notes/2026-11-22-wakeup-cost.md).

Measured in one run, one request in flight, 1 KB:
- Redis PING and XADD (redis-py, one connection: two thread wake-ups per round trip);
- NATS JetStream publish (nats-py, a file-stored stream, one replica), as the peers table;
- a bare pyzmq DEALER -> ROUTER echo in Python (a child process, no work at all), blocking,
  and with the client spinning on a non-blocking receive instead of sleeping in it;
- Ferry: a Ping to the broker-store, a Ping to broker-remoting, and a sync send (SDK ->
  remoting -> store -> back), against a local cluster (ASYNC_FLUSH).
Redis and NATS need `make bench-peers` (their servers and the `bench` group); without it
their rows say so.

    uv run --frozen --all-packages --group bench python bench/wakeups.py [--samples 3000] [--runs 3]
        [--halt-poll-ns N]
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zmq
from common import halt_poll, percentile
from store_cpu import overlay_env

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import PingRequest
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
ECHO_SERVER = """
import sys, zmq
ctx = zmq.Context(); sock = ctx.socket(zmq.ROUTER)
sock.bind("tcp://127.0.0.1:*"); print(sock.last_endpoint.decode(), flush=True)
while True:
    sock.send_multipart(sock.recv_multipart())
"""

Sample = Callable[[], None]


def timings(fn: Sample, samples: int) -> tuple[float, float]:
    """(p50, p99) in µs of fn, after 200 calls of warm-up."""
    for _ in range(200):
        fn()
    took = []
    for _ in range(samples):
        started = time.perf_counter()
        fn()
        took.append((time.perf_counter() - started) * 1e6)
    return percentile(took, 0.5), percentile(took, 0.99)


def echo(samples: int, spin: bool) -> tuple[float, float]:
    server = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)

        def once() -> None:
            sock.send_multipart([b"", BODY])
            if not spin:
                sock.recv_multipart()
                return
            while True:
                try:
                    sock.recv_multipart(zmq.NOBLOCK)
                    return
                except zmq.Again:
                    continue

        try:
            return timings(once, samples)
        finally:
            sock.close()
            ctx.term()
    finally:
        server.kill()
        server.wait()


def ping(endpoint: str, samples: int) -> tuple[float, float]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    codec = RequestCodec()
    ids = iter(range(1, 1 << 30))

    def once() -> None:
        sock.send_multipart(codec.request_frames(RequestEnvelope(next(ids), PingRequest())))
        sock.recv_multipart()

    try:
        return timings(once, samples)
    finally:
        sock.close()
        ctx.term()


@contextlib.contextmanager
def peer(start: Callable[[Any], Any]) -> Iterator[Any]:
    """A peer broker started by the harness in a temp dir and stopped on the way out;
    RuntimeError when it cannot start."""
    from peers.servers import PeerStartError, Servers

    with tempfile.TemporaryDirectory() as root:
        servers = Servers(Path(root))
        try:
            try:
                server = start(servers)
            except (PeerStartError, OSError) as err:
                raise RuntimeError(str(err)) from err
            yield server
        finally:
            servers.stop_all()


def redis_rows(samples: int) -> dict[str, tuple[float, float]]:
    try:
        import redis  # the `bench` group
        from peers.servers import start_redis
    except ImportError as err:
        raise RuntimeError("redis-py is not installed (make bench-peers)") from err
    with peer(start_redis) as server:
        client = redis.Redis(port=server.port)
        return {
            "Redis PING": timings(lambda: bool(client.ping()), samples),
            "Redis XADD 1 KB (AOF everysec)": timings(
                lambda: bool(client.xadd("wake", {"b": BODY})), samples
            ),
        }


def nats_rows(samples: int) -> dict[str, tuple[float, float]]:
    try:
        from peers.nats_side import NatsSide
        from peers.servers import start_nats
    except ImportError as err:
        raise RuntimeError("nats-py is not installed (make bench-peers)") from err
    with peer(start_nats) as server:
        p50, p99, _ = NatsSide(server.port).sync_latency("wake", samples)
        return {"NATS JetStream publish 1 KB (file, R1)": (p50, p99)}


def ferry_rows(samples: int, env: dict[str, str] | None = None) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as root:
        cluster = start_local_cluster(root, env=env)
        try:
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic("Wake", 4, 4)
            rows = {
                "Ferry Ping to broker-store": ping(cluster.store_endpoint, samples),
                "Ferry Ping to broker-remoting": ping(f"tcp://{cluster.broker_addr}", samples),
            }
            with Producer("bench-wake", cluster.namesrv_addr) as producer:
                rows["Ferry sync send 1 KB (SDK -> remoting -> store)"] = timings(
                    lambda: producer.send(Message("Wake", BODY)) and None, samples
                )
            return rows
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="also run Ferry's services from the sources under DIR (store_cpu.py --compare)",
    )
    parser.add_argument(
        "--halt-poll-ns",
        type=int,
        default=None,
        help="the guest's haltpoll polling for the run (root; the old value is put back)",
    )
    args = parser.parse_args()
    with halt_poll(args.halt_poll_ns) as polling:
        rounds, missing = measure(args)
    width = max(map(len, rounds))
    print(
        f"\none request in flight, {args.samples} samples x {args.runs} rounds, "
        f"guest_halt_poll_ns {polling}; µs"
    )
    print(f"{'round trip':<{width}}  {'p50 median (min-max)':>24}  {'p99 median':>10}")
    for name, figures in rounds.items():
        p50s = sorted(f[0] for f in figures)
        p99s = sorted(f[1] for f in figures)
        p50 = f"{p50s[len(p50s) // 2]:,.0f} ({p50s[0]:,.0f}-{p50s[-1]:,.0f})"
        print(f"{name:<{width}}  {p50:>24}  {p99s[len(p99s) // 2]:>10,.0f}")
    for name, why in missing.items():
        print(f"{name}: not measured: {why}")


def measure(
    args: argparse.Namespace,
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, str]]:
    rounds: dict[str, list[tuple[float, float]]] = {}
    missing: dict[str, str] = {}
    for run in range(args.runs):
        rows: dict[str, tuple[float, float]] = {}
        try:
            rows |= redis_rows(args.samples)
        except RuntimeError as err:
            missing["Redis"] = str(err).splitlines()[0]
        try:
            rows |= nats_rows(args.samples)
        except RuntimeError as err:
            missing["NATS"] = str(err).splitlines()[0]
        rows["pyzmq echo, blocking receive"] = echo(args.samples, spin=False)
        rows["pyzmq echo, client spinning"] = echo(args.samples, spin=True)
        rows |= ferry_rows(args.samples)
        if args.compare:
            before = ferry_rows(args.samples, overlay_env(args.compare))
            rows |= {f"{name} [before]": figure for name, figure in before.items()}
        for name, figure in rows.items():
            rounds.setdefault(name, []).append(figure)
        print(f"round {run + 1} done", flush=True)
    return rounds, missing


if __name__ == "__main__":
    main()
