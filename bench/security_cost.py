"""What security costs a client (issue 27): the same single broker group (a name server and a
master, `start_local_cluster`) three ways, side by side in one run:
- off;
- authenticationEnabled + authorizationEnabled (every request signed with HMAC-SHA256 and
  checked against the ACL 2.0 policies of a Normal user allowed Pub/Sub on the bench's topics
  and groups);
- the same plus tlsEnable (CURVE on every ZeroMQ socket, client and internal).

    uv run python bench/security_cost.py [--rounds 5] [--messages 20000] [--sync 2000]
    uv run python bench/security_cost.py --rounds 0 --perf [--messages 100000]

Every round measures each mode right after the other (a different one first each round), so
a change of load on this shared machine hits them alike. A round, per mode: produce
(send_batch of 128 x 1 KB from 4 threads, msg/s from the first send to the last answer), then
consume of what was just sent (a new PullConsumer group from the first offset), then sync
send latency (one in flight). Each produce and consume also reports the CPU it cost per
message, this process's and every cluster process's, in all and for produce by process
(once the cluster has settled: bench/client_throughput.py's settle()). Prints median and
spread (min-max) per mode, and each round's ratio to "off" in that round.

--perf: then, per mode, one produce and one consume of --messages under `perf record` (every
process of the cluster and this one, cpu-clock at 999 Hz), and prints where the samples fell
by shared object (python, libcrypto's HMAC, libsodium's CURVE, libzmq, the kernel) and the
top symbols: what security costs in CPU and where it goes.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from client_throughput import _cluster_cpu, _sdk_usage, latency_samples, produce_batches, settle
from client_throughput import consume as consume_all
from common import Figure, percentile, report
from itest_support import SMALL_STORE, wait_for
from security_support import ROOT, SECURITY, generate_keys

from ferry.admin import Admin
from ferry.client import Credentials
from ferry.protocol.errors import FerryError
from ferry.runtime.launcher import LocalCluster, start_local_cluster

BODY = b"x" * 1024
USER = Credentials("bench", "bench-secret-0123")
OFF, AUTH, TLS = "off", "auth+acl", "auth+acl+tls"
MODES = (OFF, AUTH, TLS)


def start(mode: str, root: Path, keys: Path) -> tuple[LocalCluster, dict[str, Any]]:
    overrides = dict(SMALL_STORE)
    opts: dict[str, Any] = {}
    if mode != OFF:
        overrides.update(SECURITY)
        opts["credentials"] = USER
    if mode == TLS:
        overrides.update(generate_keys(keys))
        opts["tls_server_key"] = str(keys / "server.key")
    cluster = start_local_cluster(str(root / mode.replace("+", "-")), overrides=overrides)
    admin_opts = {**opts, "credentials": ROOT} if mode != OFF else opts
    with Admin(cluster.namesrv_addr, **admin_opts) as admin:
        # one topic per round: consume reads exactly one round's sends
        for r in [*range(63), "Perf"]:
            admin.create_topic(f"Cost{r}", 4, 4, broker_addr=cluster.broker_addr)
        if mode != OFF:
            admin.create_user(USER.access_key, USER.secret_key, "Normal")
            admin.create_acl(
                f"User:{USER.access_key}", ["Topic:Cost*", "Group:bench*"], ["Pub", "Sub"], "Allow"
            )
            # the name server learns the user from the broker's push
            wait_for(lambda: routed(cluster.namesrv_addr, opts), 30, "the bench user pushed")
    return cluster, opts


def routed(namesrv: str, opts: dict[str, Any]) -> bool:
    try:
        with Admin(namesrv, **opts) as admin:
            admin.topic_route("Cost0")
    except FerryError:
        return False
    return True


BATCH, THREADS = 128, 4


def produced(messages: int) -> int:
    """How many messages produce() stores for --messages (the warm-up batch included)."""
    return max(1, messages // THREADS // BATCH) * BATCH * THREADS + BATCH


def produce(namesrv: str, topic: str, messages: int, opts: dict[str, Any]) -> tuple[float, int]:
    return produce_batches(namesrv, topic, messages, BATCH, THREADS, **opts)


def consume(namesrv: str, topic: str, group: str, expected: int, opts: dict[str, Any]) -> float:
    return float(consume_all(namesrv, topic, group, expected, **opts))


def perf_profile(
    mode: str, cluster: LocalCluster, opts: dict[str, Any], messages: int, out: Path
) -> str:
    pids = [sp.pid for sp in cluster.processes] + [os.getpid()]
    data = out / f"perf-{mode.replace('+', '-')}.data"
    recorder = subprocess.Popen(
        ["perf", "record", "-F", "999", "-o", str(data), "-p", ",".join(map(str, pids))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # wait-ok: perf has no ready signal; it attaches within this
    rate, stored = produce(cluster.namesrv_addr, "CostPerf", messages, opts)
    pulled = consume(cluster.namesrv_addr, "CostPerf", "bench-perf", stored, opts)
    recorder.send_signal(signal.SIGINT)
    recorder.wait(60)
    lines = [f"== {mode}: produce {rate:,.0f} msg/s, consume {pulled:,.0f} msg/s (under perf)"]
    lines.append("pids: " + ", ".join(f"{sp.name}={sp.pid}" for sp in cluster.processes))
    lines.append(f"pids: bench={os.getpid()}")
    for sort, top in (("pid,dso", 24), ("dso,sym", 16)):
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--sort", sort, "--stdio"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        rows = [r for r in report.splitlines() if r.strip() and not r.startswith("#")]
        lines += [f"-- by {sort}", *rows[:top]]
    return "\n".join(lines)


def one_round(
    cluster: LocalCluster, opts: dict[str, Any], i: int, messages: int, sync: int
) -> dict[str, float]:
    ns, topic = cluster.namesrv_addr, f"Cost{i}"
    stored = produced(messages)
    made = cpu_costed(cluster, stored, lambda: produce(ns, topic, messages, opts)[0])
    read = cpu_costed(cluster, stored, lambda: consume(ns, topic, f"bench-{i}", stored, opts))
    samples = latency_samples(ns, topic, sync, **opts)
    row = {
        "produce": made.pop("figure"),
        "consume": read.pop("figure"),
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "produce_cpu": sum(made.values()),
        "consume_cpu": sum(read.values()),
    }
    row.update({f"produce_cpu:{name}": made[name] for name in BY_PROCESS})
    return row


BY_PROCESS = ("client", "broker-remoting", "broker-store", "index")


def cpu_costed(cluster: LocalCluster, moved: int, fn: Callable[[], float]) -> dict[str, float]:
    """fn's figure, and the CPU µs per message of this process ("client") and of each cluster
    process, once the cluster has settled (bench/client_throughput.py's settle)."""
    pids = {sp.name: sp.pid for sp in cluster.processes}
    settle(list(pids.values()))
    before = {name: _cluster_cpu([pid]) for name, pid in pids.items()}
    client_before = _sdk_usage()[0]
    out = {"figure": fn()}
    out["client"] = (_sdk_usage()[0] - client_before) / moved * 1e6
    for name, pid in pids.items():
        out[name] = (_cluster_cpu([pid]) - before[name]) / moved * 1e6
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20_000, help="produced per round")
    parser.add_argument("--sync", type=int, default=2000, help="sync sends per round")
    parser.add_argument("--perf", action="store_true", help="then profile each mode (perf)")
    args = parser.parse_args()
    if not 0 <= args.rounds <= 63:
        parser.error("--rounds must be within 0..63")
    keys_of = (
        "produce",
        "consume",
        "p50",
        "p99",
        "produce_cpu",
        "consume_cpu",
        *(f"produce_cpu:{name}" for name in BY_PROCESS),
    )
    runs: dict[str, dict[str, list[float]]] = {m: {k: [] for k in keys_of} for m in MODES}
    with tempfile.TemporaryDirectory(prefix="ferry-security-cost-") as tmp:
        keys = Path(tmp) / "keys"
        clusters: dict[str, tuple[LocalCluster, dict[str, Any]]] = {}
        try:
            for mode in MODES:
                clusters[mode] = start(mode, Path(tmp), keys)
            for i in range(args.rounds):
                order = MODES[i % len(MODES) :] + MODES[: i % len(MODES)]
                for mode in order:
                    cluster, opts = clusters[mode]
                    row = one_round(cluster, opts, i, args.messages, args.sync)
                    for key, value in row.items():
                        runs[mode][key].append(value)
                    print(
                        f"round {i + 1}: {mode}: produce {row['produce']:,.0f} msg/s, consume "
                        f"{row['consume']:,.0f} msg/s, sync p50 {row['p50']:,.0f} µs "
                        f"p99 {row['p99']:,.0f} µs; CPU µs/msg produce "
                        f"{row['produce_cpu']:.1f} consume {row['consume_cpu']:.1f}",
                        flush=True,
                    )
            if args.perf:
                for mode in MODES:
                    cluster, opts = clusters[mode]
                    print(perf_profile(mode, cluster, opts, args.messages, Path(tmp)), flush=True)
        finally:
            for cluster, _ in clusters.values():
                cluster.stop()
    if not args.rounds:
        return 0
    names = {
        "produce": ("produce, send_batch 128 x 1 KB, 4 threads", "msg/s"),
        "consume": ("consume, PullConsumer", "msg/s"),
        "p50": ("sync send p50", "µs"),
        "p99": ("sync send p99", "µs"),
        "produce_cpu": ("produce CPU per message, client + cluster", "µs"),
        "consume_cpu": ("consume CPU per message, client + cluster", "µs"),
        **{f"produce_cpu:{n}": (f"produce CPU per message, {n}", "µs") for n in BY_PROCESS},
    }
    figures = [
        Figure(f"{mode}: {names[k][0]}", names[k][1], runs[mode][k])
        for k in keys_of
        for mode in MODES
    ]
    # each round against "off" in the same round: load moves a round alike
    figures += [
        Figure(
            f"{mode} / off, same round: {names[k][0]}",
            "%",
            [100 * v / b for v, b in zip(runs[mode][k], runs[OFF][k], strict=True)],
        )
        for k in keys_of
        for mode in MODES
        if mode != OFF and ":" not in k
    ]
    report("security cost", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
