"""Which records of a queue one GET returns, as [start, stop) ranges of the log.

Records a queue holds side by side in the log (a batch is written in one piece) join into one
range, so a pull of 256 records from two batches is two slices, not 256. `collect` is the C
walk over the raw ConsumeQueue entries (no filter); `collect_py` is the reference, and the
only path for filtered pulls (tags, SQL92).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from ferry import native
from ferry.store.consume_queue import ConsumeQueue
from ferry.store.property_filter import RecordMatch

log = logging.getLogger("ferry.store")

Runs = list[tuple[int, int]]
# native.queue_runs' last field
_LIMIT, _BAD = 1, 2


def collect(
    cq: ConsumeQueue, queue_offset: int, max_msgs: int, max_bytes: int, log_end: int
) -> tuple[Runs, int, int]:
    """(runs, records taken, the queue offset after them), without a tag filter."""
    runs: Runs = []
    count = total = 0
    nxt = queue_offset
    for raw in cq.chunks(queue_offset, max_msgs):
        got, count, total, used, state = native.queue_runs(
            raw, count, total, max_msgs, max_bytes, log_end
        )
        if got and runs and runs[-1][1] == got[0][0]:  # the run goes on into the next file
            runs[-1] = (runs[-1][0], got[0][1])
            got = got[1:]
        runs.extend(got)
        nxt += used
        if state == _BAD:
            entry = cq.entry_at(nxt)
            phys, size = (entry[0], entry[1]) if entry is not None else (-1, -1)
            _outside(cq, nxt, phys, size)
            break
        if state == _LIMIT:
            break
    return runs, count, nxt


def collect_py(
    cq: ConsumeQueue,
    queue_offset: int,
    scan: int,
    max_msgs: int,
    max_bytes: int,
    wanted: Collection[int] | None,
    log_end: int,
    match: RecordMatch | None = None,
) -> tuple[Runs, int, int]:
    """As collect, over at most `scan` entries, skipping tags codes not `wanted` and records
    that do not `match`."""
    runs: list[list[int]] = []
    count = total = 0
    nxt = queue_offset
    for phys, size, tags in cq.entries(queue_offset, scan):
        if wanted is not None and tags not in wanted:
            nxt += 1
            continue
        if size <= 0 or phys + size > log_end:
            _outside(cq, nxt, phys, size)
            break
        if match is not None and not match(phys, size):
            nxt += 1
            continue
        if count and total + size > max_bytes:
            break
        if runs and runs[-1][1] == phys:
            runs[-1][1] += size
        else:
            runs.append([phys, phys + size])
        count += 1
        total += size
        nxt += 1
        if count >= max_msgs:
            break
    return [(a, b) for a, b in runs], count, nxt


def _outside(cq: ConsumeQueue, offset: int, phys: int, size: int) -> None:
    log.error("%s: entry %d points outside the log (%d, %d)", cq.name, offset, phys, size)
