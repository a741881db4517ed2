"""Reading one ConsumeQueue's records for a pull: the offset checks, the read gate of the
in-sync set, tag and SQL92 filters, and the runs of the log the records lie in."""

from __future__ import annotations

from collections.abc import Collection

from ferry import native
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import BrokerSystemError
from ferry.store import pull_runs
from ferry.store.commit_log import CommitLog
from ferry.store.consume_queue import ConsumeQueue
from ferry.store.property_filter import record_matcher
from ferry.store.store_results import GetResult

MAX_GET_MSGS = 65_536
# ConsumeQueue entries a filtered get looks at before answering NO_MATCHED_MSG (RocketMQ's
# maxFilterMessageCount)
FILTER_SCAN = 16_000
# the same for an SQL92 filter, which reads each record's properties (~2 us a record): fewer,
# so that one sparse filter holds the store's loop for milliseconds, not tens of them
SQL_FILTER_SCAN = 4_000


def get_records(
    commit_log: CommitLog,
    cq: ConsumeQueue | None,
    confirmed: int | None,
    queue_offset: int,
    max_msgs: int,
    max_bytes: int,
    tag_codes: Collection[int],
    payload: bool,
    sql: str,
) -> GetResult:
    """MessageStore.get on the queue cq (None: no such queue); confirmed is the store's read
    gate (None: readers see the whole log)."""
    lo, hi = (cq.min_offset, cq.max_offset) if cq is not None else (0, 0)
    if cq is not None and confirmed is not None and confirmed < commit_log.end:
        # readers see only what the in-sync set holds (gate_reads): the rest may be cut
        hi = cq.first_past(max(lo, min(queue_offset, hi)), hi, confirmed)
    if queue_offset < lo or queue_offset > hi:
        nearest = lo if queue_offset < lo else hi
        return GetResult(PullStatus.OFFSET_ILLEGAL, nearest, lo, hi)
    if queue_offset == hi or cq is None:
        return GetResult(PullStatus.NO_NEW_MSG, queue_offset, lo, hi)
    max_msgs = min(max(max_msgs, 1), MAX_GET_MSGS, hi - queue_offset)
    wanted = set(tag_codes) if tag_codes else None
    match = record_matcher(commit_log, sql) if sql else None
    scan = max_msgs
    if wanted is not None or match is not None:
        most = FILTER_SCAN if match is None else SQL_FILTER_SCAN
        scan = min(max(max_msgs, most), hi - queue_offset)
    if wanted is None and match is None and native.ENABLED:
        runs, count, nxt = pull_runs.collect(cq, queue_offset, max_msgs, max_bytes, commit_log.end)
    else:
        runs, count, nxt = pull_runs.collect_py(
            cq, queue_offset, scan, max_msgs, max_bytes, wanted, commit_log.end, match
        )
    if count == 0:
        if nxt > queue_offset:
            return GetResult(PullStatus.NO_MATCHED_MSG, nxt, lo, hi)
        raise BrokerSystemError(f"{cq.name}: entry {queue_offset} is unreadable")
    if not payload:
        return GetResult(PullStatus.FOUND, nxt, lo, hi, count, b"", runs)
    if len(runs) == 1:
        data: memoryview | bytes = commit_log.view(runs[0][0], runs[0][1])
    else:
        data = b"".join([commit_log.view(a, b) for a, b in runs])
    return GetResult(PullStatus.FOUND, nxt, lo, hi, count, data, runs)
