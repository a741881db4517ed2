"""Ferry end to end through the SDK, remoting and the store, on a local cluster.

    uv run python bench/client_throughput.py [--runs 3] [--messages 100000]
    uv run python bench/client_throughput.py --compare /tmp/old-sdk [--runs 3]

Measures, with 1 KB bodies: produce throughput with batches (send_batch of 128, 4 threads),
single-message send_async calls (the SDK batches them), sync send latency p50/p99 (one in
flight), pull throughput (PullConsumer.poll), and end-to-end latency from send_async to a
PushConsumer's listener at a steady rate (bench/push_consumer.py's). For each workload it
also reports what a message cost in CPU: the SDK process's CPU time and context switches per
message (getrusage: every thread, those that ended included) and the cluster's CPU time per
message (/proc of every service process), which mean more than msg/s on a loaded machine.

--compare DIR runs the client side of every round twice, in child processes against the same
cluster: once with DIR first on PYTHONPATH (a copy of an older `ferry/client` and
`ferry/protocol`, e.g. from `git archive`), once with the tree's code, alternating, so that
before and after are measured in the same session under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import push_consumer
from common import Figure, percentile, report, timed

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
TICKS = os.sysconf("SC_CLK_TCK")
WORKLOADS = ("produce", "send_async", "sync", "consume", "e2e")


def produce_batches(
    namesrv: str, topic: str, messages: int, batch: int, threads: int, **client: Any
) -> tuple[float, int]:
    """Returns (msg/s, messages stored), the warm-up batch included in the count. client:
    more options of the Producer (credentials, tls_server_key)."""
    per_thread = max(1, messages // threads // batch)

    def work() -> int:
        with Producer("bench-producer", namesrv, **client) as producer:
            msgs = [Message(topic, BODY) for _ in range(batch)]
            producer.send_batch(msgs)  # warm the route

            def loop() -> None:
                for _ in range(per_thread):
                    producer.send_batch(msgs)

            pool = [threading.Thread(target=loop) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        return per_thread * batch * threads

    return timed(work), per_thread * batch * threads + batch


def send_async_singles(namesrv: str, topic: str, count: int) -> float:
    """`count` single-message send_async calls from one thread, until every Future is done."""
    with Producer("bench-async", namesrv, send_timeout_ms=30_000) as producer:
        producer.send(Message(topic, BODY))  # the route, before timing
        started = time.perf_counter()
        futures = [producer.send_async(Message(topic, BODY)) for _ in range(count)]
        for fut in futures:  # in order: as_completed costs ~8 µs a future, result() ~2
            fut.result(timeout=300)
        return float(count / (time.perf_counter() - started))


def latency_samples(namesrv: str, topic: str, count: int, **client: Any) -> list[float]:
    """µs of each of `count` sync sends, one in flight, after 200 to warm up."""
    with Producer("bench-latency", namesrv, **client) as producer:
        for _ in range(200):  # warm up
            producer.send(Message(topic, BODY))
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            producer.send(Message(topic, BODY))
            samples.append((time.perf_counter() - started) * 1e6)
    return samples


def sync_latency(namesrv: str, topic: str, count: int) -> tuple[float, float, float]:
    samples = latency_samples(namesrv, topic, count)
    return percentile(samples, 0.5), percentile(samples, 0.99), count / (sum(samples) / 1e6)


def consume(
    namesrv: str,
    topic: str,
    group: str,
    expected: int,
    pull_batch: int = 512,
    threshold_per_queue: int = 2000,
    **client: Any,
) -> float:
    # pulls of 512 (NATS fetches 500, Redis reads 1,000): 446k -> 489k msg/s against pulls of
    # 256 on one cluster, 4 alternating rounds (2026-11-26; docs/perf-notes/2026-11-26-wakeups.md)
    def work() -> int:
        got = 0
        with PullConsumer(
            group,
            namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            pull_batch_size=pull_batch,
            pull_threshold_for_queue=threshold_per_queue,
            **client,
        ) as consumer:
            consumer.subscribe(topic)
            deadline = time.monotonic() + 120
            while got < expected and time.monotonic() < deadline:
                got += len(consumer.poll(timeout=1.0))
        if got < expected:  # a rate of part of the messages would mean nothing
            raise RuntimeError(f"consumed {got} of {expected} from {topic}")
        return got

    return timed(work)


# ---- CPU accounting ----


def _sdk_usage() -> tuple[float, int]:
    """(CPU seconds, context switches) of this process, every thread, ended ones included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_nvcsw + ru.ru_nivcsw


def _cluster_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def settle(pids: list[int], busy: float = 0.1, window_s: float = 0.5, limit_s: float = 60) -> None:
    """Waits (up to limit_s) until the cluster uses under `busy` of a core: the index and the
    other followers catch up with the last workload before the next one is charged."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = _cluster_cpu(pids)
        time.sleep(window_s)  # wait-ok: sampling CPU use over a window
        if _cluster_cpu(pids) - before < busy * window_s:
            return


def costed(pids: list[int], moved: int, fn: Callable[[], float]) -> dict[str, float]:
    """Runs fn (returning its own figure) and adds CPU µs and context switches per message."""
    settle(pids)
    cpu0, ctx0 = _sdk_usage()
    cluster0 = _cluster_cpu(pids)
    figure = fn()
    cpu1, ctx1 = _sdk_usage()
    cluster = _cluster_cpu(pids) - cluster0
    return {
        "figure": figure,
        "sdk_cpu_us": (cpu1 - cpu0) / moved * 1e6,
        "sdk_ctx": (ctx1 - ctx0) / moved,
        "cluster_cpu_us": cluster / moved * 1e6,
    }


def client_round(
    namesrv: str, pids: list[int], tag: str, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """Every chosen workload once, on fresh topics named after `tag`."""
    out: dict[str, dict[str, float]] = {}
    workloads = args.workloads.split(",")
    with Admin(namesrv) as admin:
        for name in ("Prod", "Async", "Lat", "E2e"):
            admin.create_topic(f"{name}{tag}", 4, 4)
    stored = 0
    if "produce" in workloads or "consume" in workloads:
        topic = f"Prod{tag}"
        holder: list[int] = []

        def produce() -> float:
            rate, moved = produce_batches(namesrv, topic, args.messages, 128, 4)
            holder.append(moved)
            return rate

        out["produce"] = costed(pids, args.messages, produce)
        stored = holder[0]
    if "send_async" in workloads:
        topic = f"Async{tag}"
        n = args.messages
        out["send_async"] = costed(pids, n, lambda: send_async_singles(namesrv, topic, n))
    if "sync" in workloads:
        topic = f"Lat{tag}"
        n = args.latency_samples
        p99: list[float] = []

        def sync() -> float:
            p50, high, _ = sync_latency(namesrv, topic, n)
            p99.append(high)
            return p50

        out["sync_p50"] = costed(pids, n + 200, sync)
        out["sync_p99"] = {"figure": p99[0]}
    if "consume" in workloads:
        topic = f"Prod{tag}"
        group = f"bench-cg-{tag}"
        out["consume"] = costed(pids, stored, lambda: consume(namesrv, topic, group, stored))
    if "e2e" in workloads:
        topic, group = f"E2e{tag}", f"bench-e2e-{tag}"
        high: list[float] = []

        def e2e() -> float:
            samples = push_consumer.latency(namesrv, topic, group, args.rate, args.seconds)
            high.append(percentile(samples, 0.99))
            return percentile(samples, 0.5)

        out["e2e_p50"] = costed(pids, int(args.rate * args.seconds), e2e)
        out["e2e_p99"] = {"figure": high[0]}
    return out


LABELS = {
    "produce": ("produce, send_batch 128 x 1 KB, 4 threads", "msg/s"),
    "send_async": ("send_async, single 1 KB messages, one thread", "msg/s"),
    "sync_p50": ("sync send latency p50", "µs"),
    "sync_p99": ("sync send latency p99", "µs"),
    "consume": ("pull, PullConsumer.poll, 4 queues", "msg/s"),
    "e2e_p50": ("end to end, send_async -> PushConsumer at a steady rate: p50", "µs"),
    "e2e_p99": ("end to end: p99", "µs"),
}
COSTS = (
    ("sdk_cpu_us", "SDK CPU", "µs/msg"),
    ("sdk_ctx", "SDK context switches", "per 1k msg"),
    ("cluster_cpu_us", "cluster CPU", "µs/msg"),
)


def figures(rounds: list[dict[str, dict[str, float]]], suffix: str = "") -> list[Figure]:
    out: list[Figure] = []
    for key, (label, unit) in LABELS.items():
        runs = [r[key] for r in rounds if key in r]
        if not runs:
            continue
        out.append(Figure(label + suffix, unit, [r["figure"] for r in runs]))
        for cost, name, cost_unit in COSTS:
            if cost in runs[0]:
                scale = 1000 if cost == "sdk_ctx" else 1
                what = f"  {name}{suffix}"
                out.append(Figure(what, cost_unit, [r[cost] * scale for r in runs]))
    return out


def child(args: argparse.Namespace) -> None:
    pids = [int(p) for p in args.pids.split(",") if p]
    result = client_round(args.namesrv, pids, args.tag, args)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(
    args: argparse.Namespace, namesrv: str, pids: list[int], tag: str, sdk_path: str | None
) -> dict[str, dict[str, float]]:
    env = dict(os.environ)
    if sdk_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [sdk_path, env.get("PYTHONPATH")]))
    argv = [sys.executable, __file__, "--child", "--namesrv", namesrv, "--tag", tag]
    argv += ["--pids", ",".join(map(str, pids)), "--workloads", args.workloads]
    argv += ["--messages", str(args.messages), "--latency-samples", str(args.latency_samples)]
    argv += ["--rate", str(args.rate), "--seconds", str(args.seconds)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"client run {tag} failed:\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-samples", type=int, default=5000)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rate", type=int, default=2000, help="msg/s of the e2e workload")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the e2e workload")
    parser.add_argument("--compare", metavar="DIR", help="older ferry/client + ferry/protocol")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)
    parser.add_argument("--pids", default="", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    rounds: list[dict[str, dict[str, float]]] = []
    before: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as data:
        # the services keep the tree's code whatever --compare loads into the client
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        cluster = start_local_cluster(data, env=env)
        try:
            namesrv = cluster.namesrv_addr
            pids = [sp.pid for sp in cluster.processes]
            for run in range(args.runs):
                if args.compare:
                    before.append(run_child(args, namesrv, pids, f"B{run}", args.compare))
                    rounds.append(run_child(args, namesrv, pids, f"A{run}", None))
                else:
                    rounds.append(client_round(namesrv, pids, str(run), args))
        finally:
            cluster.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.compare:
        pairs = zip(figures(before, " (before)"), figures(rounds, " (after)"), strict=True)
        shown = [figure for pair in pairs for figure in pair]
    else:
        shown = figures(rounds)
    report("client throughput", shown)


if __name__ == "__main__":
    main()
