"""Sync send latency with remoting (and the other services) talking to the store over
`ipc://` or loopback TCP, alternating clusters in one run.

    uv run --frozen --all-packages python bench/store_endpoint.py [--runs 3] [--sends 1500]

Each run starts one cluster per kind (ipc first, then TCP), ASYNC_FLUSH, and times
`--sends` sync sends of 1 KB four times after a warm-up; a figure is the median of the
rounds' p50s (docs/perf-notes/2026-11-27-sync-send.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 1024


def round_p50s(endpoint_of: str, sends: int) -> list[float]:
    """p50 µs of 4 rounds of `sends` sync sends, on a new cluster."""
    with tempfile.TemporaryDirectory(prefix="ferry-ep-") as data:
        endpoint = f"ipc://{data}/store.sock" if endpoint_of == "ipc" else "tcp://127.0.0.1:0"
        with start_local_cluster(
            data, overrides={"flushDiskType": "ASYNC_FLUSH"}, store_endpoint=endpoint
        ) as cluster:
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic("EndpointBench", 4, 4)
            out = []
            with Producer("bench-endpoint", cluster.namesrv_addr) as producer:
                for _ in range(300):  # warm-up: routes, connections
                    producer.send(Message("EndpointBench", BODY))
                for _ in range(4):
                    took = []
                    for _ in range(sends):
                        started = time.perf_counter()
                        producer.send(Message("EndpointBench", BODY))
                        took.append(time.perf_counter() - started)
                    out.append(percentile(took, 0.5) * 1e6)
            return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sends", type=int, default=1500)
    args = parser.parse_args()
    p50s: dict[str, list[float]] = {"ipc": [], "tcp": []}
    for _ in range(args.runs):
        for kind in ("ipc", "tcp"):
            p50s[kind] += round_p50s(kind, args.sends)
    report(
        "store endpoint",
        [Figure(f"sync send p50, store over {kind}", "µs", runs) for kind, runs in p50s.items()],
    )


if __name__ == "__main__":
    main()
