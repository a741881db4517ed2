"""What one send costs on ferry.client.aio against the sync SDK, on one local cluster.

    uv run --frozen --all-packages python bench/aio_send_latency.py [--rounds 7]
        [--sends 3000] [--body 128] [--inflight 64] [--messages 20000] [--compare DIR]

Rounds alternate between the workloads so that each sees the same cluster and load:
- sync send: Producer.send, one in flight (µs per send, p50 and p99);
- aio send: ferry.client.aio Producer.send from one task, one in flight (what the gRPC proxy
  pays per SendMessage when its clients send one at a time);
- aio xN: N tasks each awaiting send() in a loop (messages per second; auto-batched).
Each workload runs in a process of its own (started, connected and warmed up before the
timing), which also reports its CPU per send (user + system of the whole process: the sync
SDK's I/O thread counts). The aio/sync p50 ratio is taken round by round, so that a round
slowed by the machine's other load moves both sides.

`--compare DIR` also runs the aio workloads on older SDK sources, in the same rounds: DIR
holds them as `git archive <commit> sdk | tar -x -C DIR` leaves them, put first on the
workers' PYTHONPATH (the cluster is the current tree's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import Message
from ferry.client import Producer as SyncProducer
from ferry.client.aio import Producer as AioProducer
from ferry.runtime.launcher import start_local_cluster

WARM_UP = 300
Sample = dict[str, float]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def latency(took: list[float], cpu: float) -> Sample:
    return {
        "p50": percentile(took, 0.5),
        "p99": percentile(took, 0.99),
        "cpu_us": cpu / len(took) * 1e6,
    }


def sync_sends(namesrv: str, topic: str, sends: int, body: bytes) -> Sample:
    with SyncProducer("bench-aio-lat-sync", namesrv) as producer:
        for _ in range(WARM_UP):
            producer.send(Message(topic, body))
        took = []
        cpu = cpu_s()
        for _ in range(sends):
            started = time.perf_counter()
            producer.send(Message(topic, body))
            took.append((time.perf_counter() - started) * 1e6)
        return latency(took, cpu_s() - cpu)


async def aio_sends(namesrv: str, topic: str, sends: int, body: bytes) -> Sample:
    async with AioProducer("bench-aio-lat-aio", namesrv) as producer:
        for _ in range(WARM_UP):
            await producer.send(Message(topic, body))
        took = []
        cpu = cpu_s()
        for _ in range(sends):
            started = time.perf_counter()
            await producer.send(Message(topic, body))
            took.append((time.perf_counter() - started) * 1e6)
        return latency(took, cpu_s() - cpu)


async def aio_many(namesrv: str, topic: str, count: int, tasks: int, body: bytes) -> Sample:
    async with AioProducer("bench-aio-lat-many", namesrv, send_timeout_ms=30_000) as producer:
        for _ in range(WARM_UP):
            await producer.send(Message(topic, body))
        each = count // tasks

        async def sender() -> None:
            for _ in range(each):
                await producer.send(Message(topic, body))

        cpu = cpu_s()
        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(tasks)))
        took = time.perf_counter() - started
        return {"rate": each * tasks / took, "cpu_us": (cpu_s() - cpu) / (each * tasks) * 1e6}


def worker(args: argparse.Namespace) -> None:
    """One workload, its figures printed as JSON (run by main in a process of its own)."""
    body = b"x" * args.body
    if args.worker == "sync":
        out = sync_sends(args.namesrv, "LatSync", args.sends, body)
    elif args.worker == "aio":
        out = asyncio.run(aio_sends(args.namesrv, "LatAio", args.sends, body))
    else:
        out = asyncio.run(aio_many(args.namesrv, "LatMany", args.messages, args.inflight, body))
    print(json.dumps(out))


def overlay_env(base: str | None) -> dict[str, str]:
    """The environment, with every src/ folder under `base` first on PYTHONPATH."""
    env = dict(os.environ)
    if base is not None:
        roots = sorted(str(p) for p in Path(base).glob("**/src") if (p / "ferry").is_dir())
        env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")])
    return env


def run_worker(kind: str, namesrv: str, args: argparse.Namespace, base: str | None) -> Sample:
    cmd = [sys.executable, __file__, "--worker", kind, "--namesrv", namesrv]
    for opt in ("sends", "body", "inflight", "messages"):
        cmd += [f"--{opt}", str(getattr(args, opt))]
    done = subprocess.run(
        cmd, env=overlay_env(base), capture_output=True, text=True, check=True, timeout=600
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--body", type=int, default=128)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--compare", metavar="DIR", help="older SDK sources for the aio side")
    parser.add_argument("--worker", choices=("sync", "aio", "many"), help=argparse.SUPPRESS)
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sides = {"": None} if args.compare is None else {"": None, " (compared)": args.compare}
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as data, start_local_cluster(data) as cluster:
        namesrv = cluster.namesrv_addr
        with Admin(namesrv) as admin:
            for name in ("LatSync", "LatAio", "LatMany"):
                admin.create_topic(name, 4, 4)
        for n in range(args.rounds):
            sync = run_worker("sync", namesrv, args, None)
            add("sync p50", sync["p50"])
            add("sync p99", sync["p99"])
            add("sync cpu", sync["cpu_us"])
            line = f"round: sync p50 {sync['p50']:.0f} µs"
            # the sides take turns to go first: neither always meets the cluster as the
            # other left it
            for tag, base in list(sides.items())[:: 1 if n % 2 == 0 else -1]:
                aio = run_worker("aio", namesrv, args, base)
                many = run_worker("many", namesrv, args, base)
                add(f"aio p50{tag}", aio["p50"])
                add(f"aio p99{tag}", aio["p99"])
                add(f"aio cpu{tag}", aio["cpu_us"])
                add(f"ratio{tag}", aio["p50"] / sync["p50"])
                add(f"many{tag}", many["rate"])
                add(f"many cpu{tag}", many["cpu_us"])
                line += f", aio{tag} p50 {aio['p50']:.0f} µs x{args.inflight} {many['rate']:,.0f}/s"
            print(line, flush=True)
    figures = [
        Figure("sync send p50, 1 in flight", "µs", rows["sync p50"]),
        Figure("sync send p99, 1 in flight", "µs", rows["sync p99"]),
        Figure("sync send, SDK CPU", "µs/msg", rows["sync cpu"]),
    ]
    for tag in sides:
        figures += [
            Figure(f"aio send p50, 1 in flight{tag}", "µs", rows[f"aio p50{tag}"]),
            Figure(f"aio send p99, 1 in flight{tag}", "µs", rows[f"aio p99{tag}"]),
            Figure(f"aio send, SDK CPU{tag}", "µs/msg", rows[f"aio cpu{tag}"]),
            Figure(f"aio/sync p50 ratio x100{tag}", "%", [r * 100 for r in rows[f"ratio{tag}"]]),
            Figure(f"aio send x{args.inflight} tasks{tag}", "msg/s", rows[f"many{tag}"]),
            Figure(f"aio send x{args.inflight}, SDK CPU{tag}", "µs/msg", rows[f"many cpu{tag}"]),
        ]
    report(f"aio send latency {args.body} B", figures)
    for tag in sides:
        print(f"ratio{tag}: stdev across rounds {statistics.pstdev(rows[f'ratio{tag}']):.3f}")


if __name__ == "__main__":
    main()
