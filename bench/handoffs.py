"""What one message costs each thread of each process at a steady rate: CPU and context
switches, from /proc, on a local cluster (ASYNC_FLUSH). The wake-ups behind sync-send and
end-to-end latency, counted (docs/perf-notes/2026-11-26-wakeups.md).

    uv run --frozen --all-packages --group bench python bench/handoffs.py [--path sync]
        [--rate 2000] [--seconds 5] [--runs 3] [--halt-poll-ns N] [--one-cpu]

Paths (bench/e2e_paths.py): `sync` (send() alone), `sync-pull` (send() -> PullConsumer),
`async-pull` (send_async -> PullConsumer), `async-push` (send_async -> PushConsumer: the
peers table's end-to-end row). `--halt-poll-ns` sets the guest's haltpoll cpuidle polling
(/sys/module/haltpoll/parameters/guest_halt_poll_ns, root only) for the run and puts the old
value back; `--one-cpu` runs everything, this process included, on CPU 0.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
from pathlib import Path

import e2e_paths
import push_consumer
from common import halt_poll, percentile

from ferry.admin import Admin
from ferry.runtime.launcher import start_local_cluster

# (process, thread name) -> (CPU ticks, voluntary switches, involuntary switches)
Usage = dict[tuple[str, str], tuple[int, int, int]]
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def usage(names: dict[int, str]) -> Usage:
    """Every live thread of the given processes, summed by (process, thread name)."""
    out: Usage = {}
    for pid, proc in names.items():
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
                status = (task / "status").read_text()
                thread = (task / "comm").read_text().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended between the listing and the read
            switches = {
                k: int(v)
                for k, v in (line.split(":") for line in status.splitlines() if "ctxt" in line)
            }
            key = (proc, thread)
            cpu, vol, invol = out.get(key, (0, 0, 0))
            out[key] = (
                cpu + int(stat[11]) + int(stat[12]),
                vol + switches["voluntary_ctxt_switches"],
                invol + switches["nonvoluntary_ctxt_switches"],
            )
    return out


def sdk_usage() -> Usage:
    """This process, every thread, ended ones included (the path's clients close theirs)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ticks = int((ru.ru_utime + ru.ru_stime) * 1e6 / TICK_US)
    return {("sdk", "(all threads)"): (ticks, ru.ru_nvcsw, ru.ru_nivcsw)}


# (process, thread name) -> (CPU µs, voluntary switches, involuntary switches) per message
PerMessage = dict[tuple[str, str], tuple[float, float, float]]


def one_round(args: argparse.Namespace, run: int) -> tuple[PerMessage, float]:
    """Per-message usage of each thread over one paced run, and the path's p50 in µs."""
    with tempfile.TemporaryDirectory() as data, start_local_cluster(data) as cluster:
        ns = cluster.namesrv_addr
        names = {sp.pid: sp.name for sp in cluster.processes}
        if args.one_cpu:
            for pid in [*names, os.getpid()]:
                for task in Path(f"/proc/{pid}/task").glob("*"):
                    os.sched_setaffinity(int(task.name), {0})
        topic = f"Handoffs{run}"
        with Admin(ns) as admin:
            admin.create_topic(topic, 4, 4)
        before = usage(names) | sdk_usage()
        if args.path == "sync":
            samples = e2e_paths.sync_alone(ns, topic, args.rate, args.seconds)
        elif args.path == "async-push":
            samples = push_consumer.latency(ns, topic, f"cg-{topic}", args.rate, args.seconds)
        else:
            samples = e2e_paths.to_pull(
                ns, topic, args.rate, args.seconds, args.path == "async-pull"
            )
        after = usage(names) | sdk_usage()
    sent = int(args.rate * args.seconds)
    per_msg: PerMessage = {}
    for key, (cpu, vol, invol) in after.items():
        b_cpu, b_vol, b_invol = before.get(key, (0, 0, 0))
        per_msg[key] = (
            (cpu - b_cpu) * TICK_US / sent,
            (vol - b_vol) / sent,
            (invol - b_invol) / sent,
        )
    return per_msg, percentile(samples, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--path", choices=("sync", "sync-pull", "async-pull", "async-push"), default="sync"
    )
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--halt-poll-ns", type=int, default=None)
    parser.add_argument("--one-cpu", action="store_true")
    args = parser.parse_args()
    rounds: list[PerMessage] = []
    p50s: list[float] = []
    with halt_poll(args.halt_poll_ns) as polling:
        for run in range(args.runs):
            per_msg, p50 = one_round(args, run)
            rounds.append(per_msg)
            p50s.append(p50)
            print(f"round {run + 1} done", flush=True)
    keys = sorted({k for r in rounds for k in r})
    print(
        f"\n{args.path} at {args.rate} msg/s for {args.seconds} s, {args.runs} rounds, "
        f"guest_halt_poll_ns {polling}{', all on CPU 0' if args.one_cpu else ''}; "
        "per message, medians (CPU in µs from clock ticks)"
    )
    print(f"{'process':<16} {'thread':<16} {'CPU µs':>8} {'voluntary':>10} {'involuntary':>12}")
    totals = [0.0, 0.0, 0.0]
    for key in keys:
        cols = [statistics.median(r.get(key, (0.0, 0.0, 0.0))[i] for r in rounds) for i in range(3)]
        if all(round(c, 2) == 0 for c in cols):  # idle threads
            continue
        totals = [t + c for t, c in zip(totals, cols, strict=True)]
        print(f"{key[0]:<16} {key[1]:<16} {cols[0]:>8.1f} {cols[1]:>10.2f} {cols[2]:>12.2f}")
    print(f"{'all':<16} {'':<16} {totals[0]:>8.1f} {totals[1]:>10.2f} {totals[2]:>12.2f}")
    print(f"p50 of the path: {statistics.median(p50s):,.0f} µs ({min(p50s):,.0f}-{max(p50s):,.0f})")


if __name__ == "__main__":
    main()
