"""Apache's `rocketmq` 0.4.4 client through Ferry's RocketMQ door, against Ferry's SDK on the
same cluster and against the client's own floor (issue 40 §7), in one run.

    uv run --frozen --all-packages python bench/rocketmq_door.py [--rounds 5] [--messages 15000]
    uv run --frozen --all-packages python bench/rocketmq_door.py --quick

One local cluster with its doors (start_local_cluster(rocketmq_port=0)), 128-byte bodies, a
topic of 4 queues. Every round measures, back to back:
- sync send p50/p99, one in flight (messages / 5 sends): the client through the door
  (send_sync), the SDK (Producer.send), and the client against the floor;
- produce msg/s: send_sync from 4 threads (the client: a producer per thread, see
  bench/rocketmq/client_work.py; the SDK: 4 threads on one Producer), and batches of 32
  (send_batch both), `messages` each; the SDK's send_async singles beside them;
- push consume msg/s of `messages` pre-loaded messages, first message to last: the client's
  PushConsumer (its group's offsets committed at 0 through the door first, since a new group
  starts at each queue's end) and the SDK's PushConsumer (FIRST_OFFSET), same topic; with
  the cluster's CPU (every service process) per message over the whole consumer run.
The floor is bench/rocketmq/floor_server.py: a do-nothing responder in its own process.
The client runs in child processes with its own venv (ferry.runtime.testing.client_venvs).
Figures are medians over rounds (min-max beside); ratios are medians of the per-round ratios.
Before each of door, SDK and floor the cluster is left to go idle (client_throughput.settle).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

from client_throughput import _cluster_cpu, settle
from common import RESULTS, percentile, shown

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, Producer
from ferry.client import PushConsumer as FerryPushConsumer
from ferry.protocol.rocketmq import RequestCode
from ferry.runtime.layouts import start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.remoting_client import RemotingClient

HERE = Path(__file__).parent / "rocketmq"
BODY_LEN = 128
BODY = b"x" * BODY_LEN
QUEUES = 4
THREADS = 4
BATCH = 32
Runs = dict[str, list[float]]  # figure name -> one value per round


class ClientRunner:
    """Runs bench/rocketmq/client_work.py with the client venv's python."""

    def __init__(self, home: Path) -> None:
        self.python = str(rocketmq_remoting_python())
        self.env = {**os.environ, "HOME": str(home)}  # the client's logs go under ~/logs

    def run(self, mode: str, spec: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
        done = subprocess.run(
            [self.python, str(HERE / "client_work.py"), mode, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=self.env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"client {mode} exited {done.returncode}: {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def start_floor(consume_messages: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "floor_server.py"),
            *("--queues", str(QUEUES)),
            *("--consume-messages", str(consume_messages)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # READY host:port, or EOF if it died
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"the floor responder did not start: {line!r}")
    return proc, line.split()[1]


def client_produce(runner: ClientRunner, addr: str, topic: str, sync: int, n: int) -> Runs:
    spec = {
        "namesrv": addr,
        "topic": topic,
        "body_len": BODY_LEN,
        "sync": sync,
        "threads": THREADS,
        "thread_messages": n,
        "batch": BATCH,
        "batch_messages": n,
    }
    got = runner.run("produce", spec)
    lat = got["sync_us"]
    return {
        "sync_p50": [percentile(lat, 0.5)],
        "sync_p99": [percentile(lat, 0.99)],
        "threads": [got["threads_rate"]],
        "batch": [got["batch_rate"]],
    }


def sdk_sync(producer: Producer, topic: str, sync: int, n: int) -> tuple[list[float], float]:
    """The SDK's sync send latencies in µs (one in flight, after a warm-up) and its msg/s of
    sync sends from THREADS threads (bench/grpc_proxy.py measures the same)."""
    for _ in range(50):  # the route and connections, as the client's warm-up
        producer.send(Message(topic, BODY))
    lat = []
    for _ in range(sync):
        started = time.perf_counter()
        producer.send(Message(topic, BODY))
        lat.append((time.perf_counter() - started) * 1e6)
    each = n // THREADS

    def work() -> None:
        for _ in range(each):
            producer.send(Message(topic, BODY))

    return lat, rate(each * THREADS, lambda: run_threads(work))


def sdk_produce(namesrv: str, topic: str, sync: int, n: int) -> Runs:
    with Producer("bench-rmq-sdk", namesrv) as producer:
        lat, threads = sdk_sync(producer, topic, sync, n)

        def singles() -> None:
            futures: list[Future[Any]] = [
                producer.send_async(Message(topic, BODY)) for _ in range(n)
            ]
            for f in futures:
                f.result()

        async_rate = rate(n, singles)

        def batches() -> None:
            for _ in range(n // BATCH):
                producer.send_batch([Message(topic, BODY) for _ in range(BATCH)])

        batch = rate(n // BATCH * BATCH, batches)
    return {
        "sync_p50": [percentile(lat, 0.5)],
        "sync_p99": [percentile(lat, 0.99)],
        "threads": [threads],
        "batch": [batch],
        "send_async": [async_rate],
    }


def run_threads(work: Callable[[], None]) -> None:
    workers = [threading.Thread(target=work) for _ in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def rate(count: int, fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return count / (time.perf_counter() - started)


def preload(namesrv: str, topic: str, n: int) -> int:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, QUEUES, QUEUES)
    with Producer("bench-rmq-fill", namesrv) as producer:
        for _ in range(n // BATCH):
            producer.send_batch([Message(topic, BODY) for _ in range(BATCH)])
    return n // BATCH * BATCH


def client_consume(runner: ClientRunner, door: str, broker: str, topic: str, n: int) -> float:
    group = f"bench-rmq-cg-{time.time_ns()}"
    with RemotingClient(broker) as client:  # start at 0, not at each queue's end
        for q in range(QUEUES):
            fields = {"consumerGroup": group, "topic": topic, "queueId": str(q)}
            got = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": "0"})
            if got.code != 0:
                raise RuntimeError(f"UPDATE_CONSUMER_OFFSET answered {got.code} {got.remark}")
    spec = {"namesrv": door, "topic": topic, "group": group, "count": n, "timeout_s": 120}
    return float(runner.run("consume", spec)["rate"])


def sdk_consume(namesrv: str, topic: str, n: int) -> float:
    lock = threading.Lock()
    seen = [0]
    times: dict[str, float] = {}
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        now = time.perf_counter()
        with lock:
            if seen[0] == 0:
                times["first"] = now
            seen[0] += len(msgs)
            if seen[0] >= n and "last" not in times:
                times["last"] = now
                done.set()
        return ConsumeResult.SUCCESS

    group = f"bench-sdk-cg-{time.time_ns()}"
    consumer = FerryPushConsumer(group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    with consumer:
        done.wait(120)
    if "last" not in times:
        raise RuntimeError(f"the SDK's PushConsumer consumed {seen[0]} of {n}")
    return (n - 1) / (times["last"] - times["first"])


def merge(into: Runs, more: Runs) -> None:
    for key, values in more.items():
        into.setdefault(key, []).extend(values)


def median_ratio(top: list[float], bottom: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(top, bottom, strict=True))


def spread(values: list[float]) -> str:
    return f"{shown(statistics.median(values))} ({shown(min(values))}-{shown(max(values))})"


def table(door: Runs, sdk: Runs, floor: Runs) -> tuple[list[str], dict[str, float]]:
    """The table's lines and the target figures."""
    lines = [
        "| measurement | door (rocketmq client) | Ferry SDK | floor (client, do-nothing server)"
        " | ratio |",
        "|---|---|---|---|---|",
    ]
    minus = [d - f for d, f in zip(door["sync_p50"], floor["sync_p50"], strict=True)]
    sync_ratio = median_ratio(minus, sdk["sync_p50"])
    lines.append(
        f"| sync send p50, µs | {spread(door['sync_p50'])} | {spread(sdk['sync_p50'])} | "
        f"{spread(floor['sync_p50'])} | (door - floor) / SDK {sync_ratio:.2f} |"
    )
    lines.append(
        f"| sync send p99, µs | {spread(door['sync_p99'])} | {spread(sdk['sync_p99'])} | "
        f"{spread(floor['sync_p99'])} | door / SDK "
        f"{median_ratio(door['sync_p99'], sdk['sync_p99']):.2f} |"
    )
    figures = {"sync_minus_floor_over_sdk": sync_ratio}
    for key, name in (
        ("threads", f"produce, sync send from {THREADS} threads, msg/s"),
        ("batch", f"produce, batches of {BATCH}, msg/s"),
    ):
        ratio = median_ratio(door[key], sdk[key])
        figures[key] = ratio
        lines.append(
            f"| {name} | {spread(door[key])} | {spread(sdk[key])} | {spread(floor[key])} | "
            f"door / SDK {ratio:.2f}, door / floor {median_ratio(door[key], floor[key]):.2f} |"
        )
    lines.append(
        f"| produce, SDK send_async singles (reference), msg/s | | "
        f"{spread(sdk['send_async'])} | | |"
    )
    ratio = median_ratio(door["consume"], sdk["consume"])
    figures["consume"] = ratio
    figures["consume_door_over_floor"] = median_ratio(door["consume"], floor["consume"])
    lines.append(
        f"| push consume, msg/s | {spread(door['consume'])} | {spread(sdk['consume'])} | "
        f"{spread(floor['consume'])} | door / SDK {ratio:.2f}, door / floor "
        f"{figures['consume_door_over_floor']:.2f} |"
    )
    lines.append(
        f"| push consume, cluster CPU per message, µs | {spread(door['consume_cpu_us'])} | "
        f"{spread(sdk['consume_cpu_us'])} | n/a | door / SDK "
        f"{median_ratio(door['consume_cpu_us'], sdk['consume_cpu_us']):.2f} |"
    )
    return lines, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=15_000)
    parser.add_argument("--quick", action="store_true", help="1 round of 2,000 messages")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.messages = 1, 2000
    n = args.messages
    sync = max(200, n // 5)
    began = time.time()
    load_before = os.getloadavg()
    door: Runs = {}
    sdk: Runs = {}
    floor: Runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        runner = ClientRunner(Path(tmp) / "home")
        floor_proc, floor_addr = start_floor(n // BATCH * BATCH)
        cluster = start_local_cluster(str(Path(tmp) / "data"), rocketmq_port=0)
        try:
            namesrv = cluster.namesrv_addr
            pids = [sp.pid for sp in cluster.processes]
            with Admin(namesrv) as admin:
                admin.create_topic("BenchRmqDoor", QUEUES, QUEUES)
            print(
                f"cluster: door {cluster.rocketmq_addr}, broker door "
                f"{cluster.broker_rocketmq_addr}; floor {floor_addr}"
            )
            door_addr = cluster.rocketmq_addr
            for r in range(args.rounds):
                # door, SDK and floor take turns going first, so a drift in load moves all
                sides: list[tuple[Runs, Callable[[], Runs]]] = [
                    (door, partial(client_produce, runner, door_addr, "BenchRmqDoor", sync, n)),
                    (sdk, partial(sdk_produce, namesrv, "BenchRmqDoor", sync, n)),
                    (floor, partial(client_produce, runner, floor_addr, "BenchRmqFloor", sync, n)),
                ]
                for into, fn in sides[r % 3 :] + sides[: r % 3]:
                    settle(pids)
                    merge(into, fn())
                topic = f"BenchRmqConsume{r}"
                loaded = preload(namesrv, topic, n)
                consumers: list[tuple[Runs, Callable[[], float]]] = [
                    (
                        door,
                        partial(
                            client_consume,
                            runner,
                            cluster.rocketmq_addr,
                            cluster.broker_rocketmq_addr,
                            topic,
                            loaded,
                        ),
                    ),
                    (sdk, partial(sdk_consume, namesrv, topic, loaded)),
                    (
                        floor,
                        partial(
                            client_consume,
                            runner,
                            floor_addr,
                            floor_addr,
                            f"BenchRmqFloorConsume{r}",
                            loaded,
                        ),
                    ),
                ]
                for into, consume in consumers[r % 3 :] + consumers[: r % 3]:
                    settle(pids)
                    cpu = _cluster_cpu(pids)
                    got = consume()
                    cpu_us = (_cluster_cpu(pids) - cpu) / loaded * 1e6
                    merge(into, {"consume": [got], "consume_cpu_us": [cpu_us]})
                print(
                    f"round {r + 1}: door sync p50 {door['sync_p50'][-1]:.0f} µs, "
                    f"SDK {sdk['sync_p50'][-1]:.0f}, floor {floor['sync_p50'][-1]:.0f}; "
                    f"consume door {door['consume'][-1]:.0f} msg/s, "
                    f"SDK {sdk['consume'][-1]:.0f}",
                    flush=True,
                )
        finally:
            cluster.stop()
            assert floor_proc.stdin is not None
            floor_proc.stdin.close()
            floor_proc.wait(timeout=10)
    lines, figures = table(door, sdk, floor)
    took = time.time() - began
    print(
        f"\nRocketMQ door: {args.rounds} rounds, {n} messages of {BODY_LEN} B, "
        f"{sync} sync sends; {took:.0f} s; load before "
        f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    print("\n".join(lines))
    sync_ratio = figures["sync_minus_floor_over_sdk"]
    print(
        f"\nsync p50: (door - floor) / SDK = {sync_ratio:.2f} (target <= 1.2: "
        f"{'met' if sync_ratio <= 1.2 else 'NOT met'})"
    )
    for key in ("threads", "batch", "consume"):
        print(
            f"{key}: door / SDK = {figures[key]:.2f} (target >= 0.85: "
            f"{'met' if figures[key] >= 0.85 else 'NOT met'})"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"rocketmq_door-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "door": door,
                "sdk": sdk,
                "floor": floor,
                "figures": figures,
                "load_before": load_before,
                "seconds": took,
            },
            indent=2,
        )
    )
    print(f"(saved {out})")


if __name__ == "__main__":
    main()
