"""Fuzz every port of a `ferry dev up` of its own for a few minutes (the longer run of
tests/integration/test_fuzz_ports.py, same generators): each service's request port, the
store's feed, the console's pages, OTLP receiver and raw socket, the gRPC proxy's calls and
raw socket, in rounds of a new seed each.

    uv run python bench/fuzz_ports.py [--seconds 180] [--round 10] [--seed 1] [--keep]
        [--destructive]

Prints one line per round (port, frames, frames/s, typed errors) and at the end the findings:
pings not answered in time, undecodable replies, 'internal error' replies, HTTP 5xx, and from
the cluster's own output every service exit or restart and every ERROR line (a traceback
logged by the loop's last-resort guard or a handler). Then checks that what was stored before
the run reads back unchanged. Exits 1 when there was any finding.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from fuzz_frames import (
    KEPT_TOPIC,
    REQUEST_TYPES,
    SAFE_TYPES,
    any_frames,
    otlp_bodies,
    page_paths,
    well_formed,
)
from fuzz_grpc_target import GrpcTarget, grpc_inputs, tcp_garbage
from fuzz_targets import (
    FeedTarget,
    Finding,
    HttpTarget,
    Tally,
    ZmqTarget,
    drive,
    kept_offsets,
    served_types,
    stored_log,
)
from hypothesis import strategies as st

from ferry.client import Message, Producer

FERRY = str(Path(sys.executable).parent / "ferry")
KEPT = 20


class DevUp:
    """`ferry dev up` on free ports in `data_dir`; every output line kept."""

    def __init__(self, data_dir: Path) -> None:
        argv = [FERRY, "dev", "up", "--data-dir", str(data_dir)]
        argv += ["--namesrv-port", "0", "--broker-port", "0", "--console-port", "0"]
        argv += ["--proxy-port", "0"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.endpoints: dict[str, dict[str, str]] = {}
        self.ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self.ready.wait(180):
            self.close()
            sys.exit("ferry dev up: no READY line in 180 s:\n" + "\n".join(self.lines[-40:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.lines.append(line)
            name, _, rest = line.partition("] listening ")
            if rest and name.startswith("[") and name[1:] not in self.endpoints:
                self.endpoints[name[1:]] = dict(p.split("=", 1) for p in rest.split())
            if line.startswith("READY "):
                self.ready.set()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def log_findings(lines: list[str]) -> list[Finding]:
    """Exits, restarts and ERROR lines in the cluster's output."""
    out = []
    for line in lines:
        if " exited with " in line or "not restarting" in line:
            out.append(Finding("dev up", "service exit", line, None))
        elif " ERROR " in line or line.startswith("Traceback"):
            out.append(Finding(line.partition("]")[0].lstrip("["), "ERROR line", line, None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--round", type=float, default=10.0, help="seconds per port per round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument(
        "--destructive",
        action="store_true",
        help="also well-formed requests that change data (delete topics, reset offsets, "
        "change config); the stored-data check is then skipped",
    )
    args = ap.parse_args()

    data = Path(tempfile.mkdtemp(prefix="ferry-fuzz-"))
    print(f"data dir {data}; starting ferry dev up", flush=True)
    cluster = DevUp(data)
    tallies: dict[str, Tally] = collections.defaultdict(Tally)
    seconds: dict[str, float] = collections.defaultdict(float)
    ok = True
    try:
        eps = cluster.endpoints
        broker, store = eps["broker-remoting"]["addr"], eps["broker-store"]["endpoint"]
        namesrv = eps["namesrv"]["addr"]
        with Producer("pg-kept", namesrv) as producer:
            for i in range(KEPT):
                producer.send(Message(KEPT_TOPIC, f"kept-{i}".encode()))
        log_before, offsets_before = stored_log(store), kept_offsets(broker)

        zmq_targets = {
            name: ZmqTarget(name, e.get("endpoint") or e["addr"])
            for name, e in eps.items()
            if name not in ("console", "proxy")
        }
        runs: list[tuple[str, Callable[[Any], bool], st.SearchStrategy[Any], Tally]] = []
        types = REQUEST_TYPES if args.destructive else SAFE_TYPES
        for name, target in zmq_targets.items():
            served = served_types(target, types)
            frames = st.one_of(any_frames(served), well_formed(types))
            runs.append((name, target.feed, frames, target.tally))
        store_target = zmq_targets["broker-store"]
        feed = FeedTarget(eps["broker-store"]["feed"], store_target)
        subs = st.lists(st.one_of(st.binary(max_size=24), st.just(b"\x01")), min_size=1, max_size=4)
        runs.append(("broker-store feed", feed.feed, subs, store_target.tally))
        http = HttpTarget(eps["console"]["url"])
        runs.append(("console pages", http.get, page_paths(), http.tally))
        runs.append(("console otlp", lambda b: http.post_traces(*b), otlp_bodies(), http.tally))
        runs.append(("console raw", http.raw, st.binary(max_size=300), http.tally))
        grpc_target = GrpcTarget(eps["proxy"]["grpc"], KEPT_TOPIC)
        calls = grpc_inputs(KEPT_TOPIC)
        runs.append(("proxy grpc", lambda x: grpc_target.call(*x), calls, grpc_target.tally))
        runs.append(("proxy raw", grpc_target.raw, tcp_garbage(), grpc_target.tally))

        deadline = time.monotonic() + args.seconds
        round_no = 0
        while time.monotonic() < deadline:
            round_no += 1
            for name, fn, strategy, tally in runs:
                budget = min(args.round, deadline - time.monotonic())
                if budget <= 0:
                    break
                before = (tally.sent, len(tally.findings))
                started = time.monotonic()
                seed = args.seed * 1_000_003 + round_no
                fed = drive(fn, strategy, budget_s=budget, max_examples=10**6, seed=seed)
                took = time.monotonic() - started
                seconds[name] += took
                tallies[name].sent += fed
                new = len(tally.findings) - before[1]
                print(
                    f"round {round_no:3d}  {name:<20} {fed:6d} frames  "
                    f"{fed / took:7.0f}/s  findings +{new}",
                    flush=True,
                )
        for target in zmq_targets.values():
            target.ping()
        feed.close()
        for target in zmq_targets.values():
            target.close()
        grpc_target.close()

        findings: list[Finding] = []
        for tally in {id(t): t for _, _, _, t in runs}.values():
            findings.extend(tally.findings)
        findings.extend(log_findings(cluster.lines))
        if args.destructive:
            pass  # deleting what was stored is what some of those requests are for
        elif stored_log(store)[: len(log_before)] != log_before:
            findings.append(Finding("broker-store", "data changed", "CommitLog bytes differ", None))
        if not args.destructive and kept_offsets(broker) != offsets_before:
            findings.append(Finding("broker-remoting", "data changed", "kept offsets differ", None))

        total = sum(t.sent for t in tallies.values())
        busy = sum(seconds.values())
        print(f"\n{total} frames in {busy:.0f} s of fuzzing: {total / max(busy, 1e-9):.0f}/s")
        for name, tally in tallies.items():
            print(f"  {name:<20} {tally.sent:7d}  {tally.sent / seconds[name]:6.0f}/s")
        # a log line per bad frame would let anyone fill the disk: lines per service
        per_service = collections.Counter(
            line.partition("]")[0].lstrip("[") for line in cluster.lines if line.startswith("[")
        )
        print("log lines during the run: " + ", ".join(f"{k} {v}" for k, v in per_service.items()))
        groups: dict[tuple[str, str, str], list[Finding]] = collections.defaultdict(list)
        for f in findings:
            groups[(f.port, f.kind, f.detail[:90])].append(f)
        print(f"\n{len(findings)} finding(s) in {len(groups)} group(s)")
        for (_port, _kind, _), group in sorted(groups.items()):
            print(f"  x{len(group)} {group[0]}")
        ok = not findings
    finally:
        cluster.close()
        if args.keep or not ok:
            print(f"(data and output kept in {data})")
            (data / "dev-up.log").write_text("\n".join(cluster.lines) + "\n")
        else:
            shutil.rmtree(data, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
