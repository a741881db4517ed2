"""Wake-ups and CPU per sync send, thread by thread: counts that barely depend on the load.

One request in flight, closed loop, 1 KB, a local cluster (ASYNC_FLUSH). For every thread of
every process (this one included, its main thread apart from the others) it reads, before and
after N sends, the voluntary and involuntary context switches (/proc/<pid>/task/<tid>/status)
and the CPU time the scheduler charged it (se.sum_exec_runtime of /proc/.../sched, in ns, not
clock ticks). A voluntary switch is a thread going to sleep, so each is one wake-up to come.
`--mode ping-remoting` / `ping-store` do a bare Ping instead: one ZeroMQ round trip, the floor
of each hop (docs/perf-notes/2026-11-27-sync-send.md).

`--timed` also starts the services with bench/timing_hook, which sums inside the store and
remoting the thread CPU of each call of the loop's steps and the send handlers over the same N
requests, and times `MessageStore.put` of one 1 KB record in a hot loop in this process
(bench/store_append.py, batches of 1): the same code's cost out of the cluster
(docs/perf-notes/2026-11-28-cold-handlers.md).

    uv run --frozen --all-packages python bench/send_wakeups.py [--sends 3000]
        [--mode send|ping-remoting|ping-store] [--timed]

To compare sources, put an older tree's src/ folders first on PYTHONPATH (the services
started inherit it): `git archive <commit> libs/runtime libs/protocol services sdk | tar -x
-C DIR`, then PYTHONPATH=DIR/libs/runtime/src:... (bench/store_cpu.py's overlay_env).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import store_append
import zmq
from common import percentile

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.frames import recv_frames, send_frames
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import PingRequest
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024
HOOK = Path(__file__).parent / "timing_hook"
TIMED_SERVICES = ("broker-remoting", "broker-store")
# (process, thread) -> (CPU µs, voluntary switches, involuntary switches)
Usage = dict[tuple[str, str], tuple[float, int, int]]


def usage(names: dict[int, str]) -> Usage:
    out: Usage = {}
    for pid, proc in names.items():
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                sched = (task / "sched").read_text()
                status = (task / "status").read_text()
                thread = "main" if task.name == str(pid) else (task / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            ms = float(sched.split("se.sum_exec_runtime")[1].split(":")[1].split()[0])
            switches = {
                k: int(v)
                for k, v in (line.split(":") for line in status.splitlines() if "ctxt" in line)
            }
            cpu, vol, invol = out.get((proc, thread), (0.0, 0, 0))
            out[(proc, thread)] = (
                cpu + ms * 1000,
                vol + switches["voluntary_ctxt_switches"],
                invol + switches["nonvoluntary_ctxt_switches"],
            )
    return out


def pinger(endpoint: str) -> Callable[[], None]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    codec = RequestCodec()

    def once() -> None:
        send_frames(sock, codec.request_frames(RequestEnvelope(1, PingRequest())))
        recv_frames(sock)

    return once


def hot_put_us(puts: int = 20_000) -> float:
    """µs of one MessageStore.put of a single 1 KB record, in a loop in this process."""
    return 1e6 / store_append.one_run(puts, 1, len(BODY))


def print_timed(sums: dict[str, dict[str, list[int]]], n: int, hot_put: float) -> None:
    print(f"\nthread CPU per request inside the services (bench/timing_hook), {n} requests:")
    print(f"{'process':<16} {'step':<28} {'CPU µs':>8} {'calls':>6}")
    for proc, steps in sums.items():
        for step, (ns, calls) in sorted(steps.items(), key=lambda kv: -kv[1][0]):
            print(f"{proc:<16} {step:<28} {ns / n / 1000:>8.1f} {calls / n:>6.2f}")
    print(f"{'this process':<16} {'MessageStore.put, hot loop':<28} {hot_put:>8.1f} {1:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--mode", choices=("send", "ping-remoting", "ping-store"), default="send")
    parser.add_argument("--timed", action="store_true", help="CPU per step inside the services")
    args = parser.parse_args()
    n = args.sends
    env = dict(os.environ)
    timing_dir = tempfile.TemporaryDirectory(prefix="ferry-timing-")
    if args.timed:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), env.get("PYTHONPATH")]))
        env["FERRY_TIMING_DIR"] = timing_dir.name
    sums: dict[str, dict[str, list[int]]] = {}
    with (
        timing_dir,
        tempfile.TemporaryDirectory() as data,
        start_local_cluster(data, env=env) as cluster,
    ):
        timed_pids = {sp.name: sp.pid for sp in cluster.processes if sp.name in TIMED_SERVICES}
        names = {sp.pid: sp.name for sp in cluster.processes}
        names[os.getpid()] = "sdk (this)"
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("Wakeups", 4, 4)
        with Producer("bench-wakeups", cluster.namesrv_addr) as producer:
            fn: Callable[[], object] = lambda: producer.send(Message("Wakeups", BODY))  # noqa: E731
            if args.mode == "ping-store":
                fn = pinger(cluster.store_endpoint)
            elif args.mode == "ping-remoting":
                fn = pinger(f"tcp://{cluster.broker_addr}")
            for _ in range(300):
                fn()
            time.sleep(1.0)  # start-up work (registration, the index's first reads) settles
            if args.timed:
                for pid in timed_pids.values():
                    os.kill(pid, signal.SIGUSR1)  # the sums start from here
            before = usage(names)
            took = []
            for _ in range(n):
                started = time.perf_counter()
                fn()
                took.append((time.perf_counter() - started) * 1e6)
            after = usage(names)
            if args.timed:
                sums = collect_sums(timed_pids, timing_dir.name)
    print(
        f"{args.mode}: {n} in a row, p50 {percentile(took, 0.5):,.0f} µs, "
        f"p99 {percentile(took, 0.99):,.0f} µs; per request:"
    )
    print(f"{'process':<16} {'thread':<14} {'CPU µs':>8} {'voluntary':>10} {'involuntary':>12}")
    totals = [0.0, 0.0, 0.0]
    for key in sorted(after):
        b = before.get(key, (0.0, 0, 0))
        cols = [(after[key][i] - b[i]) / n for i in range(3)]
        if round(cols[0], 1) == 0 and round(cols[1], 2) == 0:
            continue  # idle threads
        totals = [t + c for t, c in zip(totals, cols, strict=True)]
        print(f"{key[0]:<16} {key[1]:<14} {cols[0]:>8.1f} {cols[1]:>10.2f} {cols[2]:>12.2f}")
    print(f"{'all':<16} {'':<14} {totals[0]:>8.1f} {totals[1]:>10.2f} {totals[2]:>12.2f}")
    if args.timed:
        print_timed(sums, n, hot_put_us())


def collect_sums(pids: dict[str, int], directory: str) -> dict[str, dict[str, list[int]]]:
    """Asks each timed service for its sums and waits (up to 5 s each) for the file."""
    out: dict[str, dict[str, list[int]]] = {}
    for name, pid in pids.items():
        path = Path(directory) / f"{pid}.json"
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # wait-ok: the service writes the file from its signal handler
        out[name] = json.loads(path.read_text())["sums"] if path.exists() else {}
    return out


if __name__ == "__main__":
    main()
