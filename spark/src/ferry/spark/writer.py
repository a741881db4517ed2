"""The sink: each Spark task sends its rows with its own Producer.

Columns: body (binary or string, required), topic (unless the `topic` option is given), and
optionally tags (string), keys (string or array<string>), properties (map<string,string>).

Every message gets a deterministic msg id (UNIQ_KEY) made of the write's id (the streaming
query's id and batch id, or one id per batch write), the task's partition and the row's place
in it. A task Spark runs again, or a micro-batch replayed after a restart, therefore sends the
same ids again: the broker stores such duplicates (it does not deduplicate), and consumers can
drop them by msg id. Delivery is at-least-once with detectable duplicates, not exactly-once.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
)

from ferry.client import Message, Producer, SendResult
from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError
from ferry.spark.options import WriteOptions

log = logging.getLogger("ferry.spark")

BATCH_ID = "streaming.sql.batchId"  # local properties Spark sets on a micro-batch's tasks
QUERY_ID = "sql.streaming.queryId"
# the SDK and brokers set these themselves: dropped from a forwarded row (record.py)
SYSTEM = record.SYSTEM_PROPERTIES
IN_FLIGHT = 1024  # async sends outstanding per task before it waits for the oldest


def check_sink_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fails on the driver, before any task runs, when the columns cannot make messages."""
    types = {f.name: f.dataType for f in schema.fields}
    body = types.get("body")
    if not isinstance(body, BinaryType | StringType):
        raise InvalidParameterError("the sink needs a body column of type binary or string")
    if opts.topic is None and not isinstance(types.get("topic"), StringType):
        raise InvalidParameterError("the sink needs a topic column or the topic option")
    for name in ("tags", "keys", "properties"):
        if name in types and not _sink_type_ok(name, types[name]):
            raise InvalidParameterError(f"sink column {name} has type {types[name]}")


def _sink_type_ok(name: str, t: DataType) -> bool:
    if name == "tags":
        return isinstance(t, StringType)
    if name == "keys":
        return isinstance(t, StringType) or (
            isinstance(t, ArrayType) and isinstance(t.elementType, StringType)
        )
    return (
        isinstance(t, MapType)
        and isinstance(t.keyType, StringType)
        and isinstance(t.valueType, StringType)
    )


def message_id(write_id: str, partition: int, row: int) -> str:
    """32 hex digits, like a generated msg id, the same every time for the same row."""
    digest = hashlib.blake2b(f"{write_id}/{partition}/{row}".encode(), digest_size=16)
    return digest.hexdigest().upper()


def to_message(row: Any, opts: WriteOptions, msg_id: str) -> Message:
    fields = row.asDict()
    topic = opts.topic or fields.get("topic")
    if not topic:
        raise InvalidParameterError("a row has no topic and the topic option is not set")
    body = fields["body"]
    if body is None:
        raise InvalidParameterError("a row has a null body")
    props = {k: v for k, v in (fields.get("properties") or {}).items() if k not in SYSTEM}
    props[record.PROPERTY_UNIQ_KEY] = msg_id
    return Message(
        topic,
        body,
        tags=fields.get("tags"),
        keys=fields.get("keys"),
        properties=props,
    )


@dataclass
class SentCount(WriterCommitMessage):
    partition: int
    count: int


def send_rows(rows: Iterator[Any], opts: WriteOptions, write_id: str) -> SentCount:
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    count = 0
    pending: deque[Future[SendResult]] = deque()
    with Producer(
        opts.group,
        opts.namesrv,
        send_timeout_ms=opts.timeout_ms,
        credentials=opts.credentials,
        tls_server_key=opts.tls_server_key,
    ) as producer:
        for i, row in enumerate(rows):
            pending.append(
                producer.send_async(to_message(row, opts, message_id(write_id, partition, i)))
            )
            if len(pending) >= IN_FLIGHT:
                pending.popleft().result()
            count += 1
        for future in pending:
            future.result()  # raises the send's error: the task fails and Spark retries it
    return SentCount(partition, count)


class FerryBatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SentCount:
        return send_rows(iterator, self.opts, self.opts.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SentCount))
        log.info("ferry sink: write %s sent %d messages", self.opts.write_id, sent)


class FerryStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SentCount:
        ctx = TaskContext.get()
        query = batch = None
        if ctx is not None:
            query = ctx.getLocalProperty(QUERY_ID)
            batch = ctx.getLocalProperty(BATCH_ID)
        write_id = f"{query or self.opts.write_id}/{batch or 0}"
        return send_rows(iterator, self.opts, write_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SentCount))
        log.info("ferry sink: batch %d sent %d messages", batchId, sent)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # sent messages cannot be taken back; a replay sends them again with the same ids
        log.warning("ferry sink: batch %d aborted after some messages were sent", batchId)
