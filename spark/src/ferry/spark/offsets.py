"""Offsets as Spark keeps them, and planning reads from them (pure functions, no I/O but
fetch_bounds).

An offset map is {"topic": {"broker-a:0": 42, ...}}: per topic, per queue ("<broker>:<queue id>",
string keys because Spark round-trips offsets through JSON), the next offset to read. In JSON
options, -2 stands for a queue's earliest offset and -1 for its latest, as in Kafka's source."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ferry.admin import Admin
from ferry.protocol.errors import InvalidParameterError
from ferry.spark.errors import DataLossError

Offsets = dict[str, dict[str, int]]
Bounds = dict[str, dict[str, tuple[int, int]]]  # topic -> queue key -> (min, max) offsets

EARLIEST = -2
LATEST = -1
PACK_UNDER = 4096  # messages: ranges together this short share one Spark partition


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def parse_queue_key(key: str) -> tuple[str, int]:
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise InvalidParameterError(f"queue {key!r} is not of the form <broker>:<queue id>")
    return broker, int(qid)


def fetch_bounds(admin: Admin, topics: tuple[str, ...]) -> Bounds:
    """Min and max offsets of every queue of the topics (one request per broker and topic)."""
    out: Bounds = {}
    for topic in topics:
        stats = admin.topic_stats(topic)
        out[topic] = {
            queue_key(broker, q.queue_id): (q.min_offset, q.max_offset)
            for broker, queues in stats.items()
            for q in queues
        }
    return out


def latest(bounds: Bounds) -> Offsets:
    return {t: {k: hi for k, (_, hi) in qs.items()} for t, qs in bounds.items()}


def _parse_spec(spec: str, option: str) -> dict[str, dict[str, int]]:
    try:
        raw: Any = json.loads(spec)
    except ValueError:
        raise InvalidParameterError(
            f"{option} must be earliest, latest or JSON like "
            f'{{"topic": {{"broker-a:0": 42}}}}, not {spec!r}'
        ) from None
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"{option} JSON must map topics to queue offsets")
    out: dict[str, dict[str, int]] = {}
    for topic, queues in raw.items():
        if not isinstance(queues, dict):
            raise InvalidParameterError(f"{option}: {topic!r} must map queues to offsets")
        out[topic] = {}
        for key, value in queues.items():
            parse_queue_key(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
                raise InvalidParameterError(f"{option}: offset of {topic} {key} is {value!r}")
            out[topic][key] = value
    return out


def resolve(
    spec: str,
    bounds: Bounds,
    *,
    option: str,
    missing: int,
    fail_on_data_loss: bool = True,
) -> Offsets:
    """Concrete offsets for every queue of `bounds` from an option's value. Queues the JSON does
    not name get `missing` (EARLIEST or LATEST). A start before a queue's min offset means
    retention removed data: DataLossError, or the min offset when fail_on_data_loss is off."""
    word = spec.lower()
    wanted: dict[str, dict[str, int]] = {}
    if word in ("earliest", "latest"):
        missing = EARLIEST if word == "earliest" else LATEST
    else:
        wanted = _parse_spec(spec, option)
        for topic, named in wanted.items():
            if topic not in bounds:
                raise InvalidParameterError(f"{option} names topic {topic!r}, not subscribed")
            for key in named:
                if key not in bounds[topic]:
                    raise InvalidParameterError(f"{option}: {topic} has no queue {key}")
    out: Offsets = {}
    for topic, queues in bounds.items():
        out[topic] = {}
        for key, (lo, hi) in sorted(queues.items()):
            value = wanted.get(topic, {}).get(key, missing)
            if value == EARLIEST:
                value = lo
            elif value == LATEST:
                value = hi
            elif value > hi:
                raise InvalidParameterError(
                    f"{option}: {topic} {key} offset {value} is beyond its end ({hi})"
                )
            elif value < lo:
                if fail_on_data_loss and option == "startingOffsets":
                    raise DataLossError(
                        f"{topic} {key}: offsets {value}..{lo - 1} were removed by retention "
                        "(set failOnDataLoss=false to skip them)"
                    )
                value = lo
            out[topic][key] = value
    return out


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets [start, end) of one queue: one Spark task's work. A queue the query has not
    seen before starts at its earliest (new_queue: a moved min offset is no data loss)."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    new_queue: bool = False


def plan_ranges(
    start: Offsets, end: Offsets, *, max_per_partition: int, min_partitions: int = 1
) -> list[Range]:
    """One range per queue with something to read, split so no range is longer than
    max_per_partition and there are at least min_partitions when there is enough to read."""
    whole: list[Range] = []
    for topic, queues in sorted(end.items()):
        for key, stop in sorted(queues.items()):
            begin = start.get(topic, {}).get(key)
            new_queue = begin is None
            begin = 0 if begin is None else begin
            if stop > begin:
                broker, qid = parse_queue_key(key)
                whole.append(Range(topic, broker, qid, begin, stop, new_queue))
    total = sum(r.end - r.start for r in whole)
    chunk = max(1, min(max_per_partition, math.ceil(total / max(1, min_partitions))))
    out: list[Range] = []
    for r in whole:
        pieces = math.ceil((r.end - r.start) / chunk)
        step = math.ceil((r.end - r.start) / pieces)
        for lo in range(r.start, r.end, step):
            out.append(Range(r.topic, r.broker, r.queue_id, lo, min(lo + step, r.end), r.new_queue))
    return out


def pack(
    ranges: list[Range], *, max_per_partition: int, min_partitions: int = 1
) -> list[tuple[Range, ...]]:
    """The ranges, in order, gathered into partitions of up to min(PACK_UNDER,
    max_per_partition) messages; a longer range stays alone. A small read so runs as one task
    (one Python worker to start, one job for show()) rather than one per queue. With
    min_partitions above 1 every range keeps a partition of its own."""
    if min_partitions > 1:
        return [(r,) for r in ranges]
    limit = min(PACK_UNDER, max_per_partition)
    out: list[tuple[Range, ...]] = []
    group: list[Range] = []
    size = 0
    for r in ranges:
        if group and size + (r.end - r.start) > limit:
            out.append(tuple(group))
            group, size = [], 0
        group.append(r)
        size += r.end - r.start
    if group:
        out.append(tuple(group))
    return out


def cap(start: Offsets, available: Offsets, max_rows: int) -> Offsets:
    """Moves at most max_rows past `start` towards `available`, shared among queues in
    proportion to what each has waiting (as Kafka's maxOffsetsPerTrigger)."""
    waiting = {
        (t, k): stop - start.get(t, {}).get(k, 0)
        for t, qs in available.items()
        for k, stop in qs.items()
    }
    total = sum(n for n in waiting.values() if n > 0)
    if total <= max_rows:
        return {t: dict(qs) for t, qs in available.items()}
    grant = {q: n * max_rows // total if n > 0 else 0 for q, n in waiting.items()}
    left = max_rows - sum(grant.values())
    for q in sorted(waiting, key=lambda q: waiting[q] - grant[q], reverse=True):
        if left <= 0:
            break
        if waiting[q] > grant[q]:
            grant[q] += 1
            left -= 1
    out: Offsets = {}
    for (t, k), n in grant.items():
        out.setdefault(t, {})[k] = start.get(t, {}).get(k, 0) + n
    return out


def total_between(start: Offsets, end: Offsets) -> int:
    return sum(stop - start.get(t, {}).get(k, 0) for t, qs in end.items() for k, stop in qs.items())
