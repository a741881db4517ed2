"""The rows a read yields: one per message, built into Arrow record batches (much cheaper than
Python tuples), and the pull loop a Spark task runs over one queue range. Runs on executors:
everything here opens its own client and closes it."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from ferry.admin import Admin
from ferry.client import MessageExt, MessageSelector
from ferry.client.tracing import process_tracing
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import BrokerSystemError
from ferry.spark import arrow
from ferry.spark.errors import DataLossError
from ferry.spark.offsets import Range
from ferry.spark.options import ReadOptions
from ferry.spark.schema import spark_schema

ROWS_PER_BATCH = 4096  # messages per Arrow record batch handed to Spark
TRACING_SERVICE = "ferry-spark"  # service.name of executors' spans


def arrow_schema() -> pa.Schema:
    """Exactly the Arrow schema Spark checks a read's batches against."""
    return to_arrow_schema(spark_schema(), timezone="UTC")


def to_batch(msgs: list[MessageExt], schema: pa.Schema) -> pa.RecordBatch:
    types = [field.type for field in schema]
    columns = [
        arrow.strings([m.topic for m in msgs], types[0]),
        arrow.strings([m.broker_name for m in msgs], types[1]),
        arrow.integers([m.queue.queue_id for m in msgs], types[2]),
        arrow.integers([m.queue_offset for m in msgs], types[3]),
        arrow.strings([m.msg_id for m in msgs], types[4]),
        arrow.strings([m.tags for m in msgs], types[5]),
        arrow.string_lists([m.keys for m in msgs], types[6]),
        arrow.binaries([m.body for m in msgs], types[7]),
        arrow.string_maps([m.properties for m in msgs], types[8]),
        # ms -> the us Spark timestamps hold
        arrow.integers([m.born_timestamp * 1000 for m in msgs], types[9]),
        arrow.integers([m.store_timestamp * 1000 for m in msgs], types[10]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(opts: ReadOptions, part: Range) -> Iterator[pa.RecordBatch]:
    """Every message of part's queue in [start, end), in offset order, as record batches."""
    return read_ranges(opts, (part,))


def read_ranges(opts: ReadOptions, parts: Sequence[Range]) -> Iterator[pa.RecordBatch]:
    """Every message of each range in turn, with one client, as record batches of up to
    ROWS_PER_BATCH messages (small ranges share a batch)."""
    schema = arrow_schema()
    # each batch handed to Spark is a `receive` in its messages' traces (when OTEL_* is set)
    tracing = process_tracing(TRACING_SERVICE)
    pending: list[MessageExt] = []
    started_ns = time.time_ns()
    with Admin(
        opts.namesrv,
        timeout_ms=opts.timeout_ms,
        credentials=opts.credentials,
        tls_server_key=opts.tls_server_key,
    ) as admin:
        for part in parts:
            for pulled in _pull(admin, opts, part):
                pending.extend(pulled)
                if len(pending) >= ROWS_PER_BATCH:
                    tracing.record_receive(opts.pull_group, pending, started_ns, "clustering")
                    yield to_batch(pending, schema)
                    pending = []
                    started_ns = time.time_ns()
    if pending:
        tracing.record_receive(opts.pull_group, pending, started_ns, "clustering")
        yield to_batch(pending, schema)


def _pull(admin: Admin, opts: ReadOptions, part: Range) -> Iterator[list[MessageExt]]:
    """The messages of part, pull by pull, in offset order."""
    queue = next(
        (
            q
            for q in admin.queues(part.topic)
            if q.broker_name == part.broker and q.queue_id == part.queue_id
        ),
        None,
    )
    if queue is None:
        raise BrokerSystemError(f"{part.topic} has no queue {part.broker}:{part.queue_id}")
    # ferry.filter: the broker skips what the filter does not select (pushed down)
    expression = "*" if opts.sql_filter is None else MessageSelector.by_sql(opts.sql_filter)
    offset = part.start
    while offset < part.end:
        want = min(opts.pull_batch, part.end - offset)
        got = admin.pull(queue, offset, want, group=opts.pull_group, expression=expression)
        if got.status == PullStatus.FOUND:
            yield [m for m in got.messages if m.queue_offset < part.end]
            offset = got.next_begin_offset
        elif got.status == PullStatus.NO_MATCHED_MSG and got.next_begin_offset > offset:
            offset = got.next_begin_offset  # nothing selected up to there
        elif got.status == PullStatus.OFFSET_ILLEGAL and got.next_begin_offset > offset:
            if opts.fail_on_data_loss and not part.new_queue:
                raise DataLossError(
                    f"{queue}: offsets {offset}..{got.next_begin_offset - 1} were removed "
                    "by retention (set failOnDataLoss=false to skip them)"
                )
            offset = got.next_begin_offset
        else:  # the planned range is no longer there (the queue was truncated or reset)
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"{queue}: offset {offset} is not readable ({got.status.name}, the queue "
                    f"holds {got.min_offset}..{got.max_offset - 1})"
                )
            return
