from collections.abc import Callable
from typing import Any

def scan_batch(
    buf: Any,
    count: int,
    topic: bytes,
    max_body: int,
    max_record: int,
    tags_fallback: Callable[[bytes], int],
    /,
) -> tuple[list[int], list[int], list[int]] | None: ...
def stamp(
    out: bytearray,
    sizes: list[int],
    flags: list[int],
    tags: list[int],
    phys: list[int],
    k: int,
    j: int,
    queue_id: int,
    first_queue_offset: int,
    at: int,
    store_ms: int,
    host: bytes,
    cq: bytearray,
    /,
) -> int: ...
def indexed_records(buf: Any, /) -> list[tuple[int, int, list[int]]] | None: ...
def bind_sdk(
    message_fields: tuple[str, ...],
    result_fields: tuple[str, ...],
    plain_positions: tuple[int, ...],
    /,
) -> None:
    """The SDK classes' shapes, which decode_records, plain_message(s), encode_plain_batch and
    send_results need (they raise RuntimeError before it): a received message's 20 attribute
    names in the order topic, body, tags, keys, properties, delay_level, deliver_at_ms (the
    send side reads these seven), msg_id, offset_msg_id, queue, queue_offset, commitlog_offset,
    born_timestamp, store_timestamp, born_host, store_host, reconsume_times, broker_name, flag,
    sysflag; a send result's 5 in the order status, msg_id, offset_msg_id, queue, queue_offset;
    and a PlainMessage's positions of body, tags, keys and size."""

def crc32(data: Any, /) -> int: ...
def unfilled(n: int, /) -> bytearray: ...
def joined_offset_ids(host_prefix: str, phys_offsets: list[int], /) -> str | None: ...
def key_hash(topic: bytes, key: bytes, unique: bool, /) -> int: ...
def decode_records(
    buf: bytes,
    pos: int,
    broker_name: str,
    tags: frozenset[str] | None,
    out: list[Any],
    cls: type,
    queue_cls: type,
    topic_of: Callable[[bytes], str],
    unpack_host: Callable[[bytes], str],
    host_info: Callable[[bytes], tuple[str, str]],
    /,
) -> int: ...
def put_entries(
    mm: Any,
    entries_at: int,
    slots_at: int,
    slot_count: int,
    first: int,
    records: list[tuple[int, int, list[int]]],
    /,
) -> tuple[int, int, int]: ...
def encode_plain_batch(
    tail: bytes,
    msgs: list[Any],
    ids: list[str],
    born_timestamp: int,
    born_host: bytes,
    compress_over: int,
    /,
) -> bytes | None: ...
def queue_runs(
    entries: Any,
    count: int,
    total: int,
    max_msgs: int,
    max_bytes: int,
    log_end: int,
    /,
) -> tuple[list[tuple[int, int]], int, int, int, int]: ...
def plain_message(msg: Any, base_size: int, max_text: int, cls: type, /) -> Any: ...
def plain_messages(
    msgs: list[Any], topic: str, base_size: int, max_text: int, cls: type, /
) -> list[Any] | None: ...
def batch_records(
    body: Any,
    tail: bytes,
    queue_id: int,
    sysflag: int,
    born_timestamp: int,
    host: bytes,
    reconsume_times: int,
    /,
) -> tuple[bytes, int] | None:
    """A RocketMQ batch body's items as records (the door's send path); None when an item's
    sizes do not add up, a number does not fit its field or the batch is empty: the Python
    reference (ferry.remoting.door.send_records) then names the failure."""

def send_results(
    cls: type,
    status: Any,
    ids: list[str],
    phys_offsets: list[int],
    id_prefix: str,
    queue: Any,
    first_offset: int,
    /,
) -> list[Any]: ...
