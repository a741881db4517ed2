"""Ferry against Redis Streams, NATS JetStream and RabbitMQ, in one run (issue 13).

    make bench-peers                                   # installs the peers, then this
    uv run --group bench python bench/compare_peers.py [--quick] [--runs 3] [--only produce,consume]

Starts every system on loopback (Ferry twice: ASYNC_FLUSH and SYNC_FLUSH), then for each
workload runs rounds in which every system is measured back to back (each round starting at
another system), so that a Ferry/peer ratio comes from one round under one load; the tables
give medians, spreads and the median per-round ratio against each target of the issue. A peer
that does not start is reported as such. Every process started here is stopped on the way
out, Ctrl-C included. Results: bench/results/peers-*.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from common import RESULTS
from peers import report
from peers.report import (
    FERRY_ASYNC,
    FERRY_SINGLES,
    FERRY_SYNC,
    NATS,
    RABBIT,
    RABBIT_QUORUM,
    REDIS,
    REDIS_ALWAYS,
    Cell,
)
from peers.servers import Servers, start_nats, start_rabbitmq, start_redis
from peers.workload import Latency, settle

WORKLOADS = ("produce", "consume", "send_async", "sync_latency", "end_to_end", "topics")
PEERS = ("ferry", "redis", "nats", "rabbitmq")
# Rows measured on another row's system.
DRIVER_OF = {FERRY_SINGLES: FERRY_ASYNC, "Ferry, 1 topic": FERRY_ASYNC}
DRIVER_OF["Ferry, 1,000 topics"] = FERRY_ASYNC


def start_systems(servers: Servers, wanted: set[str], data: str) -> dict[str, Any]:
    """Label -> driver, or label -> the reason it could not start (a str)."""
    systems: dict[str, Any] = {}

    def attempt(labels: tuple[str, ...], start: Callable[[], tuple[Any, ...]]) -> None:
        began = time.monotonic()
        try:
            drivers = start()
        except Exception as err:  # noqa: BLE001 - reported in the tables, the run goes on
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            print(f"!! {', '.join(labels)}: did not start: {err}", flush=True)
            systems.update(dict.fromkeys(labels, f"did not start ({reason})"))
            return
        print(f"== {', '.join(labels)} up in {time.monotonic() - began:.1f}s", flush=True)
        systems.update(zip(labels, drivers, strict=True))

    if "ferry" in wanted:
        from peers.ferry_side import FerrySide, start_ferry

        def ferry(flush: str) -> tuple[Any, ...]:
            cluster = start_ferry(os.path.join(data, flush), flush)
            servers.stoppers.append(cluster.stop)
            return (FerrySide(cluster),)

        attempt((FERRY_ASYNC,), lambda: ferry("ASYNC_FLUSH"))
        attempt((FERRY_SYNC,), lambda: ferry("SYNC_FLUSH"))
    if "redis" in wanted:
        from peers.redis_side import RedisSide

        def redis() -> tuple[Any, ...]:
            port = start_redis(servers).port
            return RedisSide(port, "everysec"), RedisSide(port, "always")

        attempt((REDIS, REDIS_ALWAYS), redis)
    if "nats" in wanted:
        from peers.nats_side import NatsSide

        attempt((NATS,), lambda: (NatsSide(start_nats(servers).port),))
    if "rabbitmq" in wanted:
        from peers.rabbit_side import RabbitSide

        def rabbit() -> tuple[Any, ...]:
            port = start_rabbitmq(servers).port
            return RabbitSide(port), RabbitSide(port, quorum=True)

        attempt((RABBIT, RABBIT_QUORUM), rabbit)
    return systems


def name(key: str, label: str, rnd: int) -> str:
    """A fresh topic / stream / queue per workload, system and round."""
    slug = "".join(ch for ch in label if ch.isalnum())
    return f"{key[:4]}{rnd}{slug}"


def run_workload(
    key: str, systems: dict[str, Any], args: argparse.Namespace, results: dict[str, Any]
) -> None:
    table = next(t for t in report.TABLES if t.key == key)
    cells: dict[str, Cell] = results.setdefault(key, {})
    labels = [label for label, _ in table.rows]
    for rnd in range(args.runs):
        # each round starts at another system, so that none always runs first after the
        # pause (or last, after everyone else has churned the machine's memory)
        start = rnd * len(labels) // max(args.runs, 1)
        for label in labels[start:] + labels[:start]:
            cell = cells.setdefault(label, Cell())
            if cell.error is not None:
                continue  # failed before: not again in later rounds
            driver = systems.get(DRIVER_OF.get(label, label))
            if driver is None or isinstance(driver, str):
                cell.error = driver or "not selected"
                continue
            waited = settle()
            began = time.monotonic()
            try:
                value = measure(key, label, driver, rnd, args, results)
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noqa: BLE001 - one failed system must not end the run
                cell.error = f"{type(err).__name__}: {err}".splitlines()[0][:200]
                print(f"!! {key} / {label}: {cell.error}", flush=True)
                traceback.print_exc()
                continue
            if isinstance(value, Latency):
                cell.runs.append(value.p50)
                cell.p99s.append(value.p99)
                cell.sent_rates.append(value.sent_rate)
                shown = f"p50 {value.p50:,.0f} µs, p99 {value.p99:,.0f} µs"
                if value.sent_rate:
                    shown += f", sent at {value.sent_rate:,.0f} msg/s"
            else:
                cell.runs.append(value)
                shown = f"{value:,.0f} msg/s"
            took = time.monotonic() - began
            print(
                f"   {key} round {rnd + 1} {label}: {shown} ({took:.1f}s; "
                f"waited {waited:.1f}s for an idle machine)",
                flush=True,
            )


def measure(
    key: str,
    label: str,
    driver: Any,
    rnd: int,
    args: argparse.Namespace,
    results: dict[str, Any],
) -> float | Latency:
    n = args.messages
    if key == "produce":
        if label == FERRY_SINGLES:
            return float(driver.send_async(name("produce", label, rnd), n))
        return float(driver.produce(name("produce", label, rnd), n))
    if key == "consume":
        stream = name("produce", label, rnd)
        produced = results.get("produce", {}).get(label)
        if produced is None or len(produced.runs) <= rnd:
            driver.produce(stream, n)  # produce was not run (or failed): fill, untimed
        return float(driver.consume(stream, n))
    if key == "send_async":  # the produce rounds' figures, so ratios stay within a round
        produced = results.get("produce", {}).get(label)
        if produced is not None and len(produced.runs) > rnd:
            return float(produced.runs[rnd])
        if label == FERRY_SINGLES:
            return float(driver.send_async(name(key, label, rnd), n))
        return float(driver.produce(name(key, label, rnd), n))  # the same per-message calls
    if key == "sync_latency":
        return driver.sync_latency(name(key, label, rnd), args.latency_samples)  # type: ignore[no-any-return]
    if key == "end_to_end":
        return driver.end_to_end(name(key, label, rnd), args.rate, args.seconds)  # type: ignore[no-any-return]
    if key == "topics":
        topics = 1 if label == "Ferry, 1 topic" else args.topics
        return float(driver.spread_topics(f"Spread{topics}", topics, n))
    raise ValueError(key)


def machine() -> dict[str, object]:
    def out(*argv: str) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    rabbit = sorted(Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*"))
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": out("git", "rev-parse", "--short", "HEAD")
        + (" (+ uncommitted changes)" if out("git", "status", "--porcelain") else ""),
        "machine": f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "peers": {
            "redis": out("redis-server", "--version"),
            "nats": out("nats-server", "--version"),
            "rabbitmq": rabbit[-1].name if rabbit else "",
        },
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small and 1 round")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-samples", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads, comma-separated")
    parser.add_argument("--peers", default=",".join(PEERS), help="systems, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: results/)")
    parser.add_argument("--render", type=Path, help="print the tables of a saved run's JSON")
    args = parser.parse_args()
    if args.render:
        run, saved = report.load(args.render)
        print(f"{run}\n{report.text_tables(saved)}\n{report.markdown_tables(saved)}")
        return
    if args.quick:
        args.runs, args.messages, args.latency_samples = 1, 10_000, 500
        args.seconds = 2.0
    only = [w for w in WORKLOADS if w in args.only.split(",")]
    header = machine() | {"args": {k: str(v) for k, v in vars(args).items()}}
    print(f"peers comparison: {header}", flush=True)
    out = args.out or RESULTS / f"peers-{time.strftime('%Y%m%d-%H%M%S')}.json"

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    results: dict[str, dict[str, Cell]] = {}
    with tempfile.TemporaryDirectory(prefix="ferry-peers-") as data:
        servers = Servers(Path(data))
        try:
            systems = start_systems(servers, set(args.peers.split(",")), data)
            for key in only:
                print(f"== {key}", flush=True)
                run_workload(key, systems, args, results)
        except KeyboardInterrupt:
            header["interrupted"] = True
            print("\ninterrupted: stopping everything started", flush=True)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish stopping, even on a 2nd ^C
            servers.stop_all()
            signal.signal(signal.SIGINT, signal.default_int_handler)
    header["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(report.text_tables(results))
    report.save(out, header, results)
    print(f"\n(saved {out} and {out.with_suffix('.md')})")


if __name__ == "__main__":
    main()
