"""Where Ferry's time goes: produce and consume paths, SDK and each service process.

    uv run --group bench python bench/profile_ferry.py [--messages 100000] [--phases sync,e2e]

Starts a local cluster (launcher, ASYNC_FLUSH) and runs each phase twice on a fresh topic:
1. sampled: py-spy (from the `bench` group) attached by pid to the SDK process and to every
   service, all threads, without pausing them; plus CPU time and context switches per process
   from /proc. Gives each process's CPU µs per message and its top functions by own time.
2. counted: cProfile on each process's main thread (the services' loop; see
   peers/cprofile_hook) and on the SDK's calling thread. Gives calls per message.
Phases: produce (send_batch 128 x 4 threads), consume (PullConsumer, pulls of 512),
send_async (single messages, SDK auto-batching), sync (send(), one in flight).
Report: printed and written to bench/results/profile-<time>.txt.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import client_throughput
import push_consumer
from common import RESULTS

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import LocalCluster, start_local_cluster

HERE = Path(__file__).parent
BODY = b"x" * 1024
TOP = 12
TIMEOUT_MS = 30_000  # profiled services on a loaded machine can be slow; slow is not failed
TICKS = os.sysconf("SC_CLK_TCK")
# Frames where a thread waits rather than works: counted apart, so the tops show work.
WAITS = ("poll", "Poller.poll", "select", "wait", "Condition.wait", "acquire", "sleep")
WAITS += ("<method 'acquire'", "<built-in method time.sleep", "_wait_for_tstate_lock")
WAITS += ("Thread._wait_for_tstate_lock", "Event.wait", "<built-in method select")


def waiting(function: str) -> bool:
    return function.startswith(tuple(w + " " for w in WAITS)) or function in WAITS


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime, all threads


def context_switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:  # voluntary and not
                    total += int(line.split()[1])
        except OSError:
            continue  # a thread that just ended
    return total


E2E_RATE = 2000
E2E_SECONDS = 5.0


class Phases:
    """Each phase takes a fresh topic and returns how many messages it moved."""

    def __init__(self, namesrv: str, messages: int, sync_sends: int) -> None:
        self.namesrv = namesrv
        self.messages = messages
        self.sync_sends = sync_sends
        self.filled: dict[str, int] = {}

    def topic(self, name: str) -> str:
        with Admin(self.namesrv) as admin:
            admin.create_topic(name, 4, 4)
        return name

    def fill(self, topic: str) -> int:
        _, stored = client_throughput.produce_batches(self.namesrv, topic, self.messages, 128, 4)
        return int(stored)

    def produce(self, topic: str) -> int:
        return self.fill(self.topic(topic))

    def consume_setup(self, topic: str) -> None:
        self.filled[topic] = self.fill(self.topic(topic))

    def consume(self, topic: str) -> int:
        client_throughput.consume(self.namesrv, topic, f"cg-{topic}", self.filled[topic])
        return self.filled[topic]

    def send_async(self, topic: str) -> int:
        self.topic(topic)
        with Producer("profile-async", self.namesrv, send_timeout_ms=TIMEOUT_MS) as producer:
            futures = [producer.send_async(Message(topic, BODY)) for _ in range(self.messages)]
            for fut in futures:
                fut.result(timeout=300)
        return self.messages

    def e2e(self, topic: str) -> int:
        """send_async at E2E_RATE msg/s for E2E_SECONDS to a PushConsumer (the peers'
        end-to-end workload)."""
        self.topic(topic)
        got = push_consumer.latency(self.namesrv, topic, f"cg-{topic}", E2E_RATE, E2E_SECONDS)
        return len(got)

    def sync(self, topic: str) -> int:
        self.topic(topic)
        with Producer("profile-sync", self.namesrv, send_timeout_ms=TIMEOUT_MS) as producer:
            for _ in range(self.sync_sends):
                producer.send(Message(topic, BODY))
        return self.sync_sends


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [py_spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw"]
    argv += ["--function", "--nonblocking", "--threads", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def top_functions(raw: Path) -> tuple[int, int, list[tuple[str, float, float]]]:
    """From py-spy's collapsed stacks: (working samples, waiting samples, [(function, own %,
    total %)]) by own time, as shares of the working samples."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = waits = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith(("thread ", "process "))]
        if not frames:
            continue
        if waiting(frames[-1]):
            waits += count
            continue
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    rows = [(fn, 100 * n / samples, 100 * total[fn] / samples) for fn, n in own.most_common(TOP)]
    return samples, waits, rows


def counted(stats_file: Path, messages: int) -> list[str]:
    stats = pstats.Stats(str(stats_file), stream=io.StringIO())
    entries = []
    grand = 0.0
    waits = 0.0
    for (file, line, fn), (_cc, ncalls, tottime, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if waiting(fn) or waiting(fn.split(" of ")[0] if fn.startswith("<method") else fn):
            waits += tottime
            continue
        grand += tottime
        entries.append((tottime, ncalls, f"{fn} ({Path(file).name}:{line})"))
    entries.sort(reverse=True)
    out = [
        f"    (working {grand / messages * 1e6:.1f} µs/msg, waiting {waits / messages * 1e6:.1f})"
    ]
    for tottime, ncalls, where in entries[:TOP]:
        out.append(
            f"    {100 * tottime / grand:5.1f}%  {ncalls / messages:8.2f} calls/msg  "
            f"{tottime / messages * 1e6:7.2f} µs/msg  {where}"
        )
    return out


def run_phase(
    name: str,
    cluster: LocalCluster,
    setup: Callable[[str], None] | None,
    work: Callable[[str], int],
    prof_dir: Path,
    lines: list[str],
) -> None:
    procs = {"sdk (this process)": os.getpid()}
    procs |= {sp.name: sp.pid for sp in cluster.processes if sp.name != "namesrv"}
    # 1. sampled
    topic = f"Prof{name.title().replace('_', '')}S"
    if setup is not None:
        setup(topic)
    spies = {label: spy(pid, prof_dir / f"{name}-{pid}.txt") for label, pid in procs.items()}
    time.sleep(1.0)  # py-spy attaching; nothing to wait on but its own start
    cpu0 = {label: cpu_seconds(pid) for label, pid in procs.items()}
    ctx0 = {label: context_switches(pid) for label, pid in procs.items()}
    started = time.perf_counter()
    moved = work(topic)
    took = time.perf_counter() - started
    cpu = {label: cpu_seconds(pid) - cpu0[label] for label, pid in procs.items()}
    ctx = {label: context_switches(pid) - ctx0[label] for label, pid in procs.items()}
    for proc in spies.values():
        proc.send_signal(signal.SIGINT)
    for proc in spies.values():
        proc.wait(30)
    lines.append(f"\n## {name}: {moved:,} messages in {took:.2f}s ({moved / took:,.0f} msg/s)")
    lines.append(f"per message (py-spy attached): wall {took / moved * 1e6:.1f} µs")
    for label in procs:
        lines.append(
            f"  {label:<20} {cpu[label] / moved * 1e6:7.2f} µs CPU/msg  "
            f"{ctx[label] / moved:7.3f} context switches/msg"
        )
    for label, pid in procs.items():
        raw = prof_dir / f"{name}-{pid}.txt"
        if not raw.exists():
            lines.append(f"\n### {label}: no py-spy samples")
            continue
        samples, waits, rows = top_functions(raw)
        lines.append(
            f"\n### {label}, sampled: {samples} working samples ({waits} waiting, left out); "
            "own% total%"
        )
        lines.extend(f"    {own:5.1f}% {total:5.1f}%  {fn}" for fn, own, total in rows)
    # 2. counted
    topic = f"Prof{name.title().replace('_', '')}C"
    if setup is not None:
        setup(topic)
    services = {label: pid for label, pid in procs.items() if pid != os.getpid()}
    for pid in services.values():
        os.kill(pid, signal.SIGUSR1)
    profile = cProfile.Profile()
    profile.enable()
    moved = work(topic)
    profile.disable()
    profile.dump_stats(str(prof_dir / f"{name}-{os.getpid()}.prof"))
    for pid in services.values():
        os.kill(pid, signal.SIGUSR2)
    for label, pid in procs.items():
        stats = prof_dir / f"{name}-{pid}.prof" if pid == os.getpid() else prof_dir / f"{pid}.prof"
        deadline = time.monotonic() + 15
        while not stats.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the service writes its stats on SIGUSR2
        if not stats.exists():
            lines.append(f"\n### {label}: no cProfile stats")
            continue
        thread = "calling thread" if pid == os.getpid() else "main thread"
        lines.append(f"\n### {label}, counted (cProfile, {thread}, {moved:,} messages)")
        lines.extend(counted(stats, moved))
        if pid != os.getpid():
            stats.rename(prof_dir / f"{name}-{pid}.prof")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sync-sends", type=int, default=3000)
    parser.add_argument("--phases", default="produce,consume,send_async,sync,e2e")
    args = parser.parse_args()
    lines = [
        f"# Ferry profile, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"load average {os.getloadavg()[0]:.2f} at start, {os.cpu_count()} cores"
    ]
    with tempfile.TemporaryDirectory(prefix="ferry-prof-") as data:
        prof_dir = Path(data) / "prof"
        prof_dir.mkdir()
        hook = str(HERE / "peers" / "cprofile_hook")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [hook, env.get("PYTHONPATH")]))
        env["FERRY_CPROFILE_DIR"] = str(prof_dir)
        cluster = start_local_cluster(os.path.join(data, "ferry"), env=env)
        try:
            phases = Phases(cluster.namesrv_addr, args.messages, args.sync_sends)
            table: dict[str, tuple[Callable[[str], None] | None, Callable[[str], int]]] = {
                "produce": (None, phases.produce),
                "consume": (phases.consume_setup, phases.consume),
                "send_async": (None, phases.send_async),
                "sync": (None, phases.sync),
                "e2e": (None, phases.e2e),
            }
            for name in args.phases.split(","):
                setup, work = table[name]
                print(f"== {name}", flush=True)
                done = len(lines)
                try:
                    run_phase(name, cluster, setup, work, prof_dir, lines)
                except Exception as err:  # noqa: BLE001 - the other phases still count
                    lines.append(f"\n## {name}: failed: {type(err).__name__}: {err}")
                print("\n".join(lines[done:]), flush=True)
        finally:
            cluster.stop()
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"profile-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    out.write_text(text)
    print(f"(saved {out})")


if __name__ == "__main__":
    main()
