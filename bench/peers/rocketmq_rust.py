"""RocketMQ in Rust (crates.io's rocketmq-namesrv / rocketmq-broker 1.0.0) against Ferry's
RocketMQ door, one Rust client for both, in one run (issue 40 §8).

    sh bench/peers/install_rocketmq_rust.sh        # once: the Rust servers and the driver
    uv run --frozen --all-packages python bench/peers/rocketmq_rust.py [--rounds 3]
        [--messages 15000]
    uv run --frozen --all-packages python bench/peers/rocketmq_rust.py --quick

Starts the Rust name server and broker on free loopback ports (their data, logs and HOME in a
temp dir) and a Ferry local cluster with its doors (start_local_cluster(rocketmq_port=0)),
creates topics of 4 queues on both, and runs bench/peers/rocketmq-rust-driver (built on
rocketmq-client-rust 1.0.0) against each name server: sync sends one at a time (messages / 5
sends, latency per send), batches of 32 (`messages`), and a push consumer of a fresh group
(CONSUME_FROM_FIRST_OFFSET) reading `messages` messages loaded beforehand, first delivery to
last. 128-byte bodies. Each round measures both systems back to back, the one going first
alternating; before each measurement the system's own processes are left to go idle. Beside
each figure: the server processes' CPU per message over the measurement. Figures are medians
over rounds (min-max beside); ratios are medians of the per-round Ferry / Rust ratios.
Results: bench/results/rocketmq_rust-*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common, peers, ...

from client_throughput import _cluster_cpu, settle
from common import RESULTS, shown

from ferry.admin import Admin
from ferry.protocol.codes import RequestCode
from ferry.runtime.layouts import start_local_cluster
from peers.servers import PeerStartError, Servers, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".ferry" / "peers"
RUST_BIN = PEERS / "rocketmq-rust" / "bin"
NAMESRV_BIN = RUST_BIN / "rocketmq-namesrv-rust"
BROKER_BIN = RUST_BIN / "rocketmq-broker-rust"
DRIVER_BIN = PEERS / "rust-driver-target" / "release" / "driver"
INSTALL = "sh bench/peers/install_rocketmq_rust.sh"

BODY_LEN = 128
QUEUES = 4
BATCH = 32
RUST = "RocketMQ-Rust"
FERRY = "Ferry door"
RUST_BROKER_NAME = "ferry-bench-rust-broker"
FRAME = struct.Struct(">ii")  # total length after this field, then the header's length
LENGTH = struct.Struct(">i")
Runs = dict[str, list[float]]  # figure name -> one value per round


@dataclass
class System:
    label: str
    namesrv: str  # the RocketMQ-protocol name server the driver dials
    pids: list[int]  # the server processes, for settle and CPU per message
    create_topic: Callable[[str], None]


def missing() -> list[Path]:
    return [p for p in (NAMESRV_BIN, BROKER_BIN, DRIVER_BIN) if not p.exists()]


def run_driver(
    namesrv: str, topic: str, workload: str, n: int, *, warmup: int = 50, timeout_s: float = 300
) -> dict[str, Any]:
    argv = [
        str(DRIVER_BIN), "--namesrv", namesrv, "--topic", topic, "--workload", workload,
        "--messages", str(n), "--body", str(BODY_LEN), "--batch", str(BATCH),
        "--warmup", str(warmup), "--max-errors", "3",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = " | ".join(done.stderr.strip().splitlines()[-2:])
        raise RuntimeError(f"driver {workload} against {namesrv} exited {done.returncode}: {said}")
    got: dict[str, Any] = json.loads(lines[-1])
    return got


def call_ok(addr: str, code: RequestCode, ext: dict[str, str]) -> bytes:
    """One request with a JSON header to a RocketMQ-protocol server; the response's body.
    The header is built here, with serializeTypeCurrentRPC, which the Rust servers require
    and Ferry's codec (ferry.runtime.testing.remoting_client) does not send."""
    header = json.dumps(
        {
            "code": int(code),
            "language": "PYTHON",
            "version": 0,
            "opaque": 1,
            "flag": 0,
            "remark": None,
            "extFields": ext,
            "serializeTypeCurrentRPC": "JSON",
        }
    ).encode()
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(FRAME.pack(4 + len(header), len(header)) + header)
        (total,) = LENGTH.unpack(read_exactly(sock, 4))
        frame = read_exactly(sock, total)
    (mark,) = LENGTH.unpack(frame[:4])
    size = mark & 0xFFFFFF
    if mark >> 24 != 0:
        raise RuntimeError(f"{addr} answered {code.name} with a non-JSON header")
    reply = json.loads(frame[4 : 4 + size])
    if reply.get("code") != 0:
        raise RuntimeError(
            f"{code.name} to {addr} answered {reply.get('code')} {reply.get('remark')}"
        )
    return frame[4 + size :]


def read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = sock.recv(n)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, RuntimeError, TimeoutError) as err:
            last = err
        time.sleep(0.2)  # between polls, bounded by the deadline
    raise RuntimeError(f"{what}: not within {timeout_s:.0f} s ({last})")


def start_rust(servers: Servers) -> System:
    """The Rust name server and broker on loopback, each with HOME and ROCKETMQ_HOME in the
    temp dir. Neither takes port 0, so the ports are picked here: the broker also listens on
    listenPort - 2 (its fast remoting port) and on haListenPort."""
    home = servers.root / "rocketmq-rust"
    home.mkdir()
    env = {"HOME": str(home), "ROCKETMQ_HOME": str(home), "RUST_LOG": "warn"}
    ns_port = free_port()
    namesrv_addr = f"127.0.0.1:{ns_port}"
    namesrv = servers.spawn(
        "rocketmq-namesrv-rust",
        [
            str(NAMESRV_BIN),
            "--listenPort",
            str(ns_port),
            "--bindAddress",
            "127.0.0.1",
            "--rocketmqHome",
            str(home),
            "--kvConfigPath",
            str(home / "namesrv-kv.json"),
        ],
        ns_port,
        env,
    )
    wait_ready(
        namesrv, lambda: call_ok(namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO, {}) != b"", 60
    )
    port, ha_port = broker_ports()
    store = json.dumps(str(home / "store"))
    conf = home / "broker.toml"  # TOML: its Java-properties reader has no bindAddress
    conf.write_text(
        f"""[broker]
namesrvAddr = "{namesrv_addr}"
brokerIp1 = "127.0.0.1"
listenPort = {port}
storePathRootDir = {store}
autoCreateTopicEnable = true

[broker.brokerIdentity]
brokerClusterName = "FerryBenchRust"
brokerName = "{RUST_BROKER_NAME}"
brokerId = 0

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[store]
storePathRootDir = {store}
haListenAddress = "127.0.0.1"
haListenPort = {ha_port}
flushDiskType = "ASYNC_FLUSH"
brokerRole = "ASYNC_MASTER"
"""
    )
    broker_addr = f"127.0.0.1:{port}"
    broker = servers.spawn(
        "rocketmq-broker-rust",
        [str(BROKER_BIN), "-c", str(conf), "-n", namesrv_addr],
        port,
        env,
    )

    def registered() -> bool:
        body = call_ok(namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO, {})
        return RUST_BROKER_NAME.encode() in body

    wait_ready(broker, registered, 120)

    def create_topic(topic: str) -> None:
        call_ok(
            broker_addr,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": str(QUEUES),
                "writeQueueNums": str(QUEUES),
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            },
        )
        wait_for(
            f"{topic}'s route in the Rust name server",
            lambda: bool(
                call_ok(namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            ),
            30,
        )

    return System(RUST, namesrv_addr, [namesrv.proc.pid, broker.proc.pid], create_topic)


def broker_ports() -> tuple[int, int]:
    """listenPort (with listenPort - 2 free too) and haListenPort."""
    for _ in range(50):
        port = free_port()
        if port - 2 >= 1024 and port_free(port - 2):
            ha = free_port()
            if ha not in (port, port - 2):
                return port, ha
    raise PeerStartError("no free loopback ports for the Rust broker")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def measure(system: System, topic: str, workload: str, n: int, **kw: Any) -> dict[str, float]:
    settle(system.pids)
    cpu = _cluster_cpu(system.pids)
    got = run_driver(system.namesrv, topic, workload, n, **kw)
    got["server_cpu_us"] = (_cluster_cpu(system.pids) - cpu) / n * 1e6
    return got


def one_round(
    systems: list[System], r: int, n: int, sync: int, failed: dict[str, dict[str, str]]
) -> dict[str, Runs]:
    """Every workload on both systems; the first system alternates with the round. A
    workload that fails on a system is recorded in `failed` and not tried there again."""
    order = systems if r % 2 == 0 else systems[::-1]
    out: dict[str, Runs] = {s.label: {} for s in systems}

    def attempt(system: System, workload: str, fn: Callable[[], dict[str, Any]]) -> None:
        if workload in failed[system.label]:
            return
        try:
            got = fn()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            failed[system.label][workload] = str(err)
            print(f"({system.label} {workload} failed: {str(err)[:300]})", flush=True)
            return
        for name in FIELDS[workload]:
            value = got.get(name)
            if value is not None:
                out[system.label].setdefault(f"{workload}_{name}", []).append(float(value))

    for system in order:
        attempt(system, "sync", partial(measure, system, "BenchRustSync", "sync", sync))
    for system in order:
        attempt(system, "batch", partial(measure, system, "BenchRustBatch", "batch", n))
    topic = f"BenchRustConsume{r}"
    for system in order:

        def consume(system: System = system) -> dict[str, Any]:
            system.create_topic(topic)
            run_driver(system.namesrv, topic, "batch", n, warmup=0)  # the messages to consume
            return measure(system, topic, "consume", n)

        attempt(system, "consume", consume)
    return out


FIELDS = {
    "sync": ("p50_us", "p99_us", "msg_per_s", "server_cpu_us"),
    "batch": ("msg_per_s", "p50_us", "server_cpu_us"),
    "consume": ("msg_per_s", "server_cpu_us"),
}
ROWS = (
    ("sync_p50_us", "sync send p50, µs (lower is better)"),
    ("sync_p99_us", "sync send p99, µs (lower is better)"),
    ("sync_msg_per_s", "sync send, one in flight, msg/s"),
    ("sync_server_cpu_us", "sync send, server CPU per message, µs"),
    ("batch_msg_per_s", f"batches of {BATCH}, msg/s"),
    ("batch_p50_us", f"batch of {BATCH} p50, µs"),
    ("batch_server_cpu_us", f"batches of {BATCH}, server CPU per message, µs"),
    ("consume_msg_per_s", "push consume, msg/s"),
    ("consume_server_cpu_us", "push consume, server CPU per message, µs"),
)


def spread(values: list[float]) -> str:
    return f"{shown(statistics.median(values))} ({shown(min(values))}-{shown(max(values))})"


def table(runs: dict[str, Runs]) -> tuple[list[str], dict[str, float]]:
    rust, ferry = runs[RUST], runs[FERRY]
    lines = [
        f"| workload | {RUST} | {FERRY} | ratio (Ferry / Rust) |",
        "|---|---|---|---|",
    ]
    ratios: dict[str, float] = {}
    for key, name in ROWS:
        if key not in rust and key not in ferry:
            continue
        a = spread(rust[key]) if key in rust else "failed"
        b = spread(ferry[key]) if key in ferry else "failed"
        shown_ratio = "n/a"
        if key in rust and key in ferry and len(rust[key]) == len(ferry[key]):
            ratio = statistics.median(f / r for f, r in zip(ferry[key], rust[key], strict=True))
            ratios[key] = ratio
            shown_ratio = f"{ratio:.2f}"
        lines.append(f"| {name} | {a} | {b} | {shown_ratio} |")
    return lines, ratios


def last(runs: Runs, key: str) -> str:
    return f"{runs[key][-1]:.0f}" if key in runs else "failed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=15_000)
    parser.add_argument("--quick", action="store_true", help="1 round of 2,000 messages")
    # `make bench-peers ARGS=...` hands compare_peers.py's options (--runs, --only) here too
    args, ignored = parser.parse_known_args()
    if ignored:
        print(f"(ignored: {' '.join(ignored)})")
    if args.quick:
        args.rounds, args.messages = 1, 2000
    absent = missing()
    if absent:
        print("missing: " + ", ".join(str(p.relative_to(ROOT)) for p in absent))
        print(f"build them with: {INSTALL}")
        print("(cargo install of rocketmq-namesrv and rocketmq-broker 1.0.0, cargo build of the")
        print("driver: an hour or more on 2 cores)")
        raise SystemExit(2)
    n = args.messages
    sync = max(200, n // 5)
    began = time.time()
    load_before = os.getloadavg()
    runs: dict[str, Runs] = {RUST: {}, FERRY: {}}
    failed: dict[str, dict[str, str]] = {RUST: {}, FERRY: {}}
    with tempfile.TemporaryDirectory(prefix="ferry-bench-rmq-rust-") as tmp:
        servers = Servers(Path(tmp))
        cluster = None
        try:
            rust = start_rust(servers)
            cluster = start_local_cluster(str(Path(tmp) / "ferry"), rocketmq_port=0)
            ferry_ns = cluster.namesrv_addr

            def ferry_topic(topic: str) -> None:
                with Admin(ferry_ns) as admin:
                    admin.create_topic(topic, QUEUES, QUEUES)

            ferry = System(
                FERRY, cluster.rocketmq_addr, [sp.pid for sp in cluster.processes], ferry_topic
            )
            systems = [rust, ferry]
            for system in systems:
                system.create_topic("BenchRustSync")
                system.create_topic("BenchRustBatch")
            print(f"{RUST}: name server {rust.namesrv}; {FERRY}: {ferry.namesrv}", flush=True)
            for r in range(args.rounds):
                for label, more in one_round(systems, r, n, sync, failed).items():
                    for key, values in more.items():
                        runs[label].setdefault(key, []).extend(values)
                rust_runs, ferry_runs = runs[RUST], runs[FERRY]
                print(
                    f"round {r + 1}: sync p50 Rust {last(rust_runs, 'sync_p50_us')} µs, "
                    f"Ferry {last(ferry_runs, 'sync_p50_us')}; batch Rust "
                    f"{last(rust_runs, 'batch_msg_per_s')} msg/s, Ferry "
                    f"{last(ferry_runs, 'batch_msg_per_s')}; consume Rust "
                    f"{last(rust_runs, 'consume_msg_per_s')} msg/s, Ferry "
                    f"{last(ferry_runs, 'consume_msg_per_s')}",
                    flush=True,
                )
        finally:
            if cluster is not None:
                cluster.stop()
            servers.stop_all()
    lines, ratios = table(runs)
    took = time.time() - began
    print(
        f"\nRocketMQ-Rust 1.0.0 vs Ferry's RocketMQ door, rocketmq-client-rust 1.0.0 driver: "
        f"{args.rounds} rounds, {n} messages of {BODY_LEN} B ({sync} sync sends); {took:.0f} s; "
        f"load before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    print("\n".join(lines))
    for label, workloads in failed.items():
        for workload, why in workloads.items():
            print(f"{label} {workload} failed: {why[:1000]}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"rocketmq_rust-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "runs": runs,
                "ratios_ferry_over_rust": ratios,
                "failed": failed,
                "rounds": args.rounds,
                "messages": n,
                "sync_sends": sync,
                "body": BODY_LEN,
                "load_before": load_before,
                "seconds": took,
            },
            indent=2,
        )
    )
    print(f"(saved {out})")


if __name__ == "__main__":
    main()
