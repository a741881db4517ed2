"""Batch and streaming readers. Planning (offsets, partitions, commits) runs on the driver with
one Admin; read() runs on executors and opens its own client (rows.read_range)."""

from __future__ import annotations

import logging
from abc import ABC
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from ferry.admin import Admin
from ferry.client import MessageQueue
from ferry.spark import offsets
from ferry.spark.offsets import EARLIEST, LATEST, Offsets, Range
from ferry.spark.options import ReadOptions
from ferry.spark.rows import read_ranges

log = logging.getLogger("ferry.spark")

try:  # admission control and Trigger.AvailableNow arrived in PySpark 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - PySpark 4.0/4.1: LegacyFerryStreamReader is used
    ADMISSION_CONTROL = False
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = ABC  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class QueueRanges(InputPartition):
    """One task's Ranges as Spark's InputPartition (plain data: pickled to the executor)."""

    ranges: tuple[Range, ...]


def _partitions(opts: ReadOptions, start: Offsets, end: Offsets) -> list[QueueRanges]:
    size = {"max_per_partition": opts.max_per_partition, "min_partitions": opts.min_partitions}
    ranges = offsets.plan_ranges(start, end, **size)
    return [QueueRanges(group) for group in offsets.pack(ranges, **size)]


class FerryBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[QueueRanges]:
        opts = self.opts
        with Admin(
            opts.namesrv,
            timeout_ms=opts.timeout_ms,
            credentials=opts.credentials,
            tls_server_key=opts.tls_server_key,
        ) as admin:
            bounds = offsets.fetch_bounds(admin, opts.topics)
        start = offsets.resolve(
            opts.starting,
            bounds,
            option="startingOffsets",
            missing=EARLIEST,
            fail_on_data_loss=opts.fail_on_data_loss,
        )
        end = offsets.resolve(opts.ending, bounds, option="endingOffsets", missing=LATEST)
        return _partitions(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRanges)
        return read_ranges(self.opts, partition.ranges)


class FerryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per broker queue live in Spark's checkpoint; `group`, when given, also gets them
    committed on the brokers after each batch so `consumerProgress` shows the query's lag."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here, no further

    def _client(self) -> Admin:
        if self._admin is None:  # planning runs in one long-lived driver-side process
            self._admin = Admin(
                self.opts.namesrv,
                timeout_ms=self.opts.timeout_ms,
                credentials=self.opts.credentials,
                tls_server_key=self.opts.tls_server_key,
            )
            self._admin.start()
        return self._admin

    def _available(self) -> Offsets:
        return offsets.latest(offsets.fetch_bounds(self._client(), self.opts.topics))

    def initialOffset(self) -> Offsets:
        bounds = offsets.fetch_bounds(self._client(), self.opts.topics)
        return offsets.resolve(
            self.opts.starting,
            bounds,
            option="startingOffsets",
            missing=LATEST,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def latestOffset(self, start: Offsets, limit: Any) -> Offsets:
        end = self._available() if self._target is None else self._target
        # a queue is never moved backwards (a broker restarted empty, a stale target)
        end = {
            t: {k: max(v, start.get(t, {}).get(k, v)) for k, v in qs.items()}
            for t, qs in end.items()
        }
        for topic, queues in start.items():  # keep queues that vanished from the route
            for key, value in queues.items():
                end.setdefault(topic, {}).setdefault(key, value)
        if isinstance(limit, ReadMaxRows):
            end = offsets.cap(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets:
        return self._available()

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[QueueRanges]:
        return _partitions(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRanges)
        return read_ranges(self.opts, partition.ranges)

    def commit(self, end: Offsets) -> None:
        group = self.opts.group
        if group is None:
            return
        admin = self._client()
        for topic, queues in end.items():
            for key, offset in queues.items():
                broker, qid = offsets.parse_queue_key(key)
                admin.update_consumer_offset(group, MessageQueue(topic, broker, qid), offset)

    def stop(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.shutdown()


class LegacyFerryStreamReader(FerryStreamReader):  # pragma: no cover - PySpark 4.0/4.1
    """Before 4.2 latestOffset() takes no arguments: no read limits, no AvailableNow."""

    def latestOffset(self) -> Offsets:  # type: ignore[override]
        if self.opts.max_per_trigger is not None:
            log.warning("maxOffsetsPerTrigger needs PySpark 4.2 or later; ignored")
        return self._available()
