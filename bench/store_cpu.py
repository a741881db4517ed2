"""CPU time and context switches per message in each broker process (no profiler attached).

    uv run --frozen --all-packages --group bench python bench/store_cpu.py [--messages 100000]
        [--native-ab] [--compare DIR] [--idle SECONDS]

Starts a local cluster (ASYNC_FLUSH unless --sync-flush) and, per round, produces with
send_batch (128 x 4 threads) on a fresh topic, then waits until the index has applied the
whole log, then consumes it with a PullConsumer. Each process's CPU time (utime + stime of all
threads, /proc/<pid>/stat) and context switches are read before and after each phase, so
the feed followers' backlog work counts against the produce that caused it. On a shared,
loaded machine read the CPU µs per message, not the msg/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import client_throughput
import zmq
from common import RESULTS

from ferry import native
from ferry.admin import Admin
from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import IndexStatusReply, IndexStatusRequest, StoreStatusRequest
from ferry.runtime.launcher import start_local_cluster

TICKS = os.sysconf("SC_CLK_TCK")
CATCH_UP_S = 600.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def context_switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


class Probe:
    """Asks the store for its log end and the index for what it applied."""

    def __init__(self, endpoint: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.codec = RequestCodec()
        self.rid = 0

    def call(self, body: Any) -> Any:
        self.rid += 1
        self.sock.send_multipart(self.codec.request_frames(RequestEnvelope(self.rid, body)))
        while True:
            if not self.sock.poll(30_000):
                raise TimeoutError(f"no answer to {type(body).__name__}")
            env, _ = self.codec.decode_reply(self.sock.recv_multipart()[1:])
            if env.id == self.rid:
                return env.body

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def wait_indexed(store: Probe, index: Probe) -> None:
    """Until the index has applied the whole log (as it is now)."""
    end = store.call(StoreStatusRequest()).max_offset
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        st = index.call(IndexStatusRequest())
        assert isinstance(st, IndexStatusReply)
        if st.applied_offset >= end:
            return
        time.sleep(0.02)  # polling a condition with a deadline
    raise TimeoutError("the index did not catch up")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads by kind: its main thread (the service loop),
    ZeroMQ's I/O threads, and the others (flush worker, pyzmq's garbage collector)."""
    out = {"main": 0.0, "zmq-io": 0.0, "other": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        kind = (
            "main" if task.name == str(pid) else "zmq-io" if comm.startswith("ZMQbg") else "other"
        )
        out[kind] += (int(fields[11]) + int(fields[12])) / TICKS
    return out


Per = dict[str, tuple[float, float]]


def measure(pids: dict[str, int], fn: Any) -> tuple[float, Per, int, dict[str, float]]:
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    ctx0 = {k: context_switches(p) for k, p in pids.items()}
    thr0 = {k: thread_cpu(p) for k, p in pids.items() if k != "sdk"}
    started = time.perf_counter()
    moved = fn()
    took = time.perf_counter() - started
    out = {
        k: ((cpu_seconds(p) - cpu0[k]) / moved * 1e6, (context_switches(p) - ctx0[k]) / moved)
        for k, p in pids.items()
    }
    threads = {}
    for k, before in thr0.items():
        after = thread_cpu(pids[k])
        for kind, t in after.items():
            threads[f"{k} {kind}"] = (t - before.get(kind, 0.0)) / moved * 1e6
    return moved / took, out, moved, threads


Rows = dict[str, list[tuple[float, dict[str, tuple[float, float]]]]]


class Variant:
    """One local cluster and the figures measured on it."""

    def __init__(
        self,
        name: str,
        data: str,
        overrides: dict[str, str],
        env: dict[str, str],
        *,
        sdk_native: bool = native.ENABLED,
    ):
        self.name = name
        self.sdk_native = sdk_native  # the SDK's loops (consumer decode) in this process
        self.cluster = start_local_cluster(os.path.join(data, name), overrides=overrides, env=env)
        self.pids = {"sdk": os.getpid()}
        self.pids |= {sp.name: sp.pid for sp in self.cluster.processes if sp.name != "namesrv"}
        self.store = Probe(self.cluster.store_endpoint)
        self.index = Probe(self.cluster.get("index").endpoints["endpoint"])
        self.rows: Rows = {}
        self.threads: dict[str, list[dict[str, float]]] = {}

    def round(self, r: int, messages: int, idle_s: float = 0.0) -> None:
        native.ENABLED = self.sdk_native
        namesrv = self.cluster.namesrv_addr
        topic = f"CpuRound{r}"
        with Admin(namesrv) as admin:
            admin.create_topic(topic, 4, 4)

        def produce() -> int:
            _, stored = client_throughput.produce_batches(namesrv, topic, messages, 128, 4)
            wait_indexed(self.store, self.index)
            return int(stored)

        time.sleep(idle_s)  # wait-ok: memory freed before an idle spell goes back to the host
        rate, per, moved, threads = measure(self.pids, produce)
        self.rows.setdefault("produce+index", []).append((rate, per))
        self.threads.setdefault("produce+index", []).append(threads)

        def consume() -> int:
            client_throughput.consume(namesrv, topic, f"cg-{topic}", moved)
            return moved

        time.sleep(idle_s)  # wait-ok: as above
        rate, per, _, threads = measure(self.pids, consume)
        self.rows.setdefault("consume", []).append((rate, per))
        self.threads.setdefault("consume", []).append(threads)

    def index_reads(self) -> int:
        """How often the index fell back to reading the log (lost or torn feed notices)."""
        return sum("reading the log" in line for line in self.cluster.get("index").output)

    def close(self) -> None:
        self.store.close()
        self.index.close()
        self.cluster.stop()

    def table(self) -> list[str]:
        names = list(self.pids)
        lines = ["| variant, phase | msg/s | " + " | ".join(names) + " | total µs |"]
        lines.append("|---" * (len(names) + 3) + "|")
        for phase, runs in self.rows.items():
            rate = statistics.median(r for r, _ in runs)
            cells = []
            total = 0.0
            for n in names:
                cpu = statistics.median(p[n][0] for _, p in runs)
                ctx = statistics.median(p[n][1] for _, p in runs)
                total += cpu
                cells.append(f"{cpu:.1f} \\| {ctx:.2f}")
            lines.append(
                f"| {self.name}, {phase} | {rate:,.0f} | " + " | ".join(cells) + f" | {total:.1f} |"
            )
        return lines

    def thread_lines(self) -> list[str]:
        """CPU µs/msg of each service's threads by kind (medians), busiest first."""
        lines = []
        for phase, runs in self.threads.items():
            medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            busy = sorted(((v, k) for k, v in medians.items() if v >= 0.05), reverse=True)
            lines.append(
                f"{self.name}, {phase}, by thread: " + ", ".join(f"{k} {v:.1f}" for v, k in busy)
            )
        return lines


def overlay_env(base: str) -> dict[str, str]:
    """PYTHONPATH with every src/ folder under `base` first: a copy of older sources
    (git archive of a commit) shadows the installed packages in the services it starts."""
    roots = sorted(str(p) for p in Path(base).glob("**/src") if (p / "ferry").is_dir())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sync-flush", action="store_true")
    parser.add_argument(
        "--compare",
        metavar="DIR",
        help="also run a cluster from the sources under DIR (e.g. `git archive HEAD services "
        "libs | tar -x -C DIR`), rounds alternating with the current tree's",
    )
    parser.add_argument(
        "--native-ab",
        action="store_true",
        help="also run a cluster (and the SDK's loops) with FERRY_NATIVE=0: the C loops' "
        "Python references, rounds alternating",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="idle before each phase, as between bursts: on a VM whose balloon reports free "
        "pages, memory a process freed comes back cold (bench/page_cache.py)",
    )
    args = parser.parse_args()
    overrides = {"flushDiskType": "SYNC_FLUSH"} if args.sync_flush else {}
    variants: list[Variant] = []
    with tempfile.TemporaryDirectory(prefix="ferry-cpu-") as data:
        try:
            if args.compare:
                variants.append(Variant("before", data, overrides, overlay_env(args.compare)))
            if args.native_ab:
                python_env = dict(os.environ) | {"FERRY_NATIVE": "0"}
                variants.append(Variant("python", data, overrides, python_env, sdk_native=False))
            variants.append(Variant("current", data, overrides, dict(os.environ)))
            for r in range(args.rounds):
                for v in variants if r % 2 == 0 else reversed(variants):
                    v.round(r, args.messages, args.idle)
                print(f"round {r} done", flush=True)
            reads = {v.name: v.index_reads() for v in variants}
        finally:
            for v in variants:
                v.close()
    lines = [
        f"# store_cpu {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"load {os.getloadavg()[0]:.1f}, {args.messages:,} msgs x {args.rounds} rounds, "
        f"{'SYNC' if args.sync_flush else 'ASYNC'}_FLUSH; medians (CPU µs/msg \\| context "
        "switches/msg)"
    ]
    for v in variants:
        lines.extend(v.table())
    lines.append("")
    for v in variants:
        lines.extend(v.thread_lines())
    lines.append(
        "index fell back to reading the log (times): "
        + ", ".join(f"{name} {n}" for name, n in reads.items())
    )
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "store_cpu.txt").open("a") as f:
        f.write(text + "\n\n")


if __name__ == "__main__":
    main()
