"""How long the embedded cluster (`ferry dev up`'s: a name server and one broker group of six
services) takes to start until a client can use it, and to stop.

    uv run python bench/cluster_start.py [--runs 5]

Every integration test that starts a cluster pays both, so this is the suite's unit cost as
much as a developer's wait. Each run starts on fresh temp dirs and free ports.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import Figure, report

from ferry.runtime.launcher import start_local_cluster

# The integration tests' small segments (tests/integration/itest_support.py)
SMALL_STORE = {"mappedFileSizeCommitLog": "4194304", "mappedFileSizeConsumeQueue": "1000000"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    starts: list[float] = []
    stops: list[float] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as data_dir:
            began = time.monotonic()
            cluster = start_local_cluster(data_dir, overrides=SMALL_STORE)
            started = time.monotonic()
            cluster.stop()
            starts.append((started - began) * 1000)
            stops.append((time.monotonic() - started) * 1000)
    report(
        "cluster start",
        [Figure("start until routed", "ms", starts), Figure("stop", "ms", stops)],
    )


if __name__ == "__main__":
    main()
