"""What the record codec yields: a decoded Record, and RecordError for bytes that are not a
well-formed record (both reached as ferry.protocol.record.X)."""

from __future__ import annotations

from typing import NamedTuple


class RecordError(ValueError):
    """Bytes that are not a well-formed record."""


class Record(NamedTuple):
    """One decoded record, as stored."""

    total_size: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sysflag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
