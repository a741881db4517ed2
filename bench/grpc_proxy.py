"""RocketMQ 5's official Python client through Ferry's gRPC proxy, against Ferry's SDK on the
same cluster, in one run (issue 41 §4).

    uv run --frozen --all-packages python bench/grpc_proxy.py [--rounds 3] [--messages 8000]
    uv run --frozen --all-packages python bench/grpc_proxy.py --quick

One local cluster, one proxy process (`python -m ferry.proxy`), 128-byte bodies, a topic of
4 queues. Every round measures, back to back:
- sync send p50/p99, one in flight (`--sync` sends): the client's Producer.send through the
  proxy, and the SDK's Producer.send;
- produce msg/s, `messages` sync sends from 4 threads: the client (4 threads on one
  Producer) and the SDK (4 threads on one Producer);
- consume msg/s of `messages` pre-loaded messages: the client's SimpleConsumer through the
  proxy (4 threads, receive(32), ack() of each: the client's ack_async is
  broken in 5.1.2), Ferry's PullConsumer, and
  Ferry's SimpleConsumer (4 threads, receive(32), ack_batch), each a fresh group.
The floor (bench/grpc/floor_server.py) is the proxy's own gRPC service with a producer that
answers at once: the client's sends against it are what gRPC and the client cost alone.
The client runs in a child process with its own venv (bench/grpc/client_work.py).
Figures are medians over rounds (min-max beside); ratios are medians of per-round ratios.
The targets (issue 41): proxy produce >= 70 % of the SDK's, proxy send p50 <= 1.5x the
SDK's, proxy receive+ack >= 50 % of PullConsumer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from client_throughput import consume, settle
from common import RESULTS, percentile
from pop_consume import pop_and_ack
from rocketmq_door import Runs, median_ratio, merge, sdk_sync, spread

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python

HERE = Path(__file__).parent / "grpc"
BODY_LEN = 128
BODY = b"x" * BODY_LEN
QUEUES = 4
THREADS = 4
BATCH = 32


class Proxy:
    """`python -m ferry.proxy` on a free port (or the floor server, when `namesrv` is None);
    its address from its READY line."""

    def __init__(self, namesrv: str | None, home: Path) -> None:
        argv = [sys.executable, "-m", "ferry.proxy", "--set", f"namesrvAddr={namesrv}",
                "--set", "proxyListenPort=0"]  # fmt: skip
        if namesrv is None:
            argv = [sys.executable, str(HERE / "floor_server.py")]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "HOME": str(home), "FERRY_PARENT_PID": str(os.getpid())},
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY "):
                self.addr = line.split("grpc=", 1)[1].strip()
                break
        else:
            raise RuntimeError("the proxy exited before READY")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep it drained

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait(timeout=15)


def client(home: Path, mode: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [str(rocketmq_grpc_python()), str(HERE / "client_work.py"), mode, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )
    if done.returncode != 0:
        raise RuntimeError(f"client {mode} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def proxy_produce(home: Path, endpoint: str, topic: str, sync: int, n: int) -> Runs:
    spec = {"endpoint": endpoint, "topic": topic, "body_len": BODY_LEN, "sync": sync,
            "threads": THREADS, "thread_messages": n}  # fmt: skip
    got = client(home, "produce", spec)
    lat = got["sync_us"]
    return {
        "sync_p50": [percentile(lat, 0.5)],
        "sync_p99": [percentile(lat, 0.99)],
        "threads": [got["threads_rate"]],
    }


def sdk_produce(namesrv: str, topic: str, sync: int, n: int) -> Runs:
    with Producer("bench-grpc-sdk", namesrv) as producer:
        lat, threads = sdk_sync(producer, topic, sync, n)
    return {
        "sync_p50": [percentile(lat, 0.5)],
        "sync_p99": [percentile(lat, 0.99)],
        "threads": [threads],
    }


def preload(namesrv: str, topic: str, n: int) -> int:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, QUEUES, QUEUES)
    with Producer("bench-grpc-preload", namesrv) as producer:
        for _ in range(n // BATCH):
            producer.send_batch([Message(topic, BODY) for _ in range(BATCH)])
    return n // BATCH * BATCH


def one_round(
    cluster: LocalCluster, proxy: Proxy, floor: Proxy, home: Path, r: int, args: argparse.Namespace
) -> tuple[Runs, Runs, Runs]:
    namesrv, pids = cluster.namesrv_addr, [sp.pid for sp in cluster.processes]
    topic = f"BenchGrpcSend{r}"
    with Admin(namesrv) as admin:
        admin.create_topic(topic, QUEUES, QUEUES)
    via: Runs = {}
    sdk: Runs = {}
    settle(pids)
    merge(via, proxy_produce(home, proxy.addr, topic, args.sync, args.messages))
    settle(pids)
    merge(sdk, sdk_produce(namesrv, topic, args.sync, args.messages))
    settle(pids)
    bare = proxy_produce(home, floor.addr, topic, args.sync, args.messages)
    source = f"BenchGrpcRecv{r}"
    n = preload(namesrv, source, args.messages)
    settle(pids)
    spec = {"endpoint": proxy.addr, "topic": source, "group": f"bench-grpc-{r}", "count": n,
            "threads": THREADS, "batch": BATCH, "timeout_s": 300}  # fmt: skip
    via["consume"] = [client(home, "consume", spec)["rate"]]
    settle(pids)
    sdk["pull"] = [consume(namesrv, source, f"bench-grpc-pull-{r}", n)]
    settle(pids)
    sdk["pop"] = [
        pop_and_ack(namesrv, source, f"bench-grpc-pop-{r}", n, THREADS, BATCH, "ack_batch")
    ]
    print(
        f"round {r}: send p50 {via['sync_p50'][0]:,.0f} vs {sdk['sync_p50'][0]:,.0f} µs, "
        f"produce {via['threads'][0]:,.0f} vs {sdk['threads'][0]:,.0f} msg/s, "
        f"consume {via['consume'][0]:,.0f} vs pull {sdk['pull'][0]:,.0f} "
        f"(Ferry pop {sdk['pop'][0]:,.0f}) msg/s; floor p50 {bare['sync_p50'][0]:,.0f} µs, "
        f"{bare['threads'][0]:,.0f} msg/s",
        flush=True,
    )
    return via, sdk, bare


def table(via: Runs, sdk: Runs, floor: Runs) -> tuple[list[str], dict[str, float]]:
    above = [v - f for v, f in zip(via["sync_p50"], floor["sync_p50"], strict=True)]
    ratios = {
        "send p50 proxy/SDK": median_ratio(via["sync_p50"], sdk["sync_p50"]),
        "send p50 (proxy-floor)/SDK": median_ratio(above, sdk["sync_p50"]),
        "produce proxy/floor": median_ratio(via["threads"], floor["threads"]),
        "produce proxy/SDK": median_ratio(via["threads"], sdk["threads"]),
        "receive+ack proxy/pull": median_ratio(via["consume"], sdk["pull"]),
        "Ferry pop/pull": median_ratio(sdk["pop"], sdk["pull"]),
    }
    rows = [
        "| figure | official client via proxy | Ferry SDK | client on the floor |",
        "|---|---|---|---|",
        f"| sync send p50 µs | {spread(via['sync_p50'])} | {spread(sdk['sync_p50'])} "
        f"| {spread(floor['sync_p50'])} |",
        f"| sync send p99 µs | {spread(via['sync_p99'])} | {spread(sdk['sync_p99'])} "
        f"| {spread(floor['sync_p99'])} |",
        f"| produce msg/s, {THREADS} threads | {spread(via['threads'])} "
        f"| {spread(sdk['threads'])} | {spread(floor['threads'])} |",
        f"| receive+ack msg/s, {THREADS} threads | {spread(via['consume'])} "
        f"| SimpleConsumer {spread(sdk['pop'])}, PullConsumer {spread(sdk['pull'])} | |",
        "",
        "| ratio | median | target |",
        "|---|---|---|",
        f"| send p50 proxy/SDK | {ratios['send p50 proxy/SDK']:.2f} | <= 1.5 |",
        f"| send p50 (proxy-floor)/SDK | {ratios['send p50 (proxy-floor)/SDK']:.2f} | |",
        f"| produce proxy/floor | {ratios['produce proxy/floor']:.2f} | |",
        f"| produce proxy/SDK | {ratios['produce proxy/SDK']:.2f} | >= 0.70 |",
        f"| receive+ack proxy/pull | {ratios['receive+ack proxy/pull']:.3f} | >= 0.50 |",
        f"| Ferry pop/pull | {ratios['Ferry pop/pull']:.3f} | |",
    ]
    return rows, ratios


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=8000)
    parser.add_argument("--sync", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="1 round, 1,600 messages")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.messages, args.sync = 1, 1600, 300
    via: Runs = {}
    sdk: Runs = {}
    bare: Runs = {}
    with tempfile.TemporaryDirectory() as data:
        home = Path(data) / "home"
        home.mkdir()
        cluster = start_local_cluster(str(Path(data) / "cluster"))
        proxy = floor = None
        try:
            with Admin(cluster.namesrv_addr) as admin:
                deadline = time.monotonic() + 15
                while not admin.master_addrs() and time.monotonic() < deadline:
                    time.sleep(0.1)  # wait-ok: polling the registration with a deadline
            proxy = Proxy(cluster.namesrv_addr, home)
            floor = Proxy(None, home)
            for r in range(args.rounds):
                a, b, c = one_round(cluster, proxy, floor, home, r, args)
                merge(via, a)
                merge(sdk, b)
                merge(bare, c)
        finally:
            for server in (proxy, floor):
                if server is not None:
                    server.stop()
            cluster.stop()
    rows, ratios = table(via, sdk, bare)
    print("\n".join(rows))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "grpc_proxy.json"
    out.write_text(
        json.dumps({"proxy": via, "sdk": sdk, "floor": bare, "ratios": ratios}, indent=1)
    )
    print(f"saved {out}")


if __name__ == "__main__":
    main()
