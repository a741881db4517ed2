"""What a queue's first write costs the store: directories, the ConsumeQueue file, the first
page, and their share of the next flush. In-process, on real files.

    uv run --frozen --all-packages python bench/new_queues.py [--runs 3] [--queues 3000]

To compare with an older store: PYTHONPATH=<old tree>/services/broker-store/src:... (the
docs/perf-notes/2026-11-22-many-topics.md shows the command it used).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import Figure, report

import ferry.store.consume_queue as consume_queue
from ferry.store.consume_queue import ConsumeQueueTable

CQ_FILE_SIZE = 300_000 * 20  # mappedFileSizeConsumeQueue's default


def one_run(queues: int) -> tuple[float, float]:
    """(µs of the loop per new queue, µs of the flush per new queue)."""
    entries = bytes(20 * 128)  # one batch's ConsumeQueue entries
    with tempfile.TemporaryDirectory() as root:
        table = ConsumeQueueTable(Path(root), CQ_FILE_SIZE)
        table.load()
        try:
            started = time.perf_counter()
            for i in range(queues):
                table.get_or_create(f"topic-{i // 4}", i % 4).append(entries, 0)
            loop = time.perf_counter() - started
            started = time.perf_counter()
            for item in table.take_dirty():  # what the next full flush syncs
                item.sync()
            flush = time.perf_counter() - started
        finally:
            table.close()
    return loop / queues * 1e6, flush / queues * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queues", type=int, default=3000)
    args = parser.parse_args()
    loops, flushes = [], []
    for _ in range(args.runs):
        loop, flush = one_run(args.queues)
        loops.append(loop)
        flushes.append(flush)
    print(f"store code from {consume_queue.__file__}")
    report(
        "new_queues",
        [
            Figure("loop time per new queue", "µs", loops),
            Figure("flush time per new queue", "µs", flushes),
        ],
    )


if __name__ == "__main__":
    main()
