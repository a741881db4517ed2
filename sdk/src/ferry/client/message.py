"""What users send and receive, and how a message becomes a CommitLog record and back."""

from __future__ import annotations

import enum
import functools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from ferry import native
from ferry.protocol import record
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError

__all__ = [
    "ConsumeFromWhere",
    "ConsumeResult",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "decode_message",
    "encode_message",
]

_SEPARATORS = (record.PROP_SEP, record.PROP_END)


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset starts (RocketMQ's CONSUME_FROM_*)."""

    LAST_OFFSET = "LAST_OFFSET"
    FIRST_OFFSET = "FIRST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeResult(enum.Enum):
    """What a push consumer's listener returns for its batch.

    Concurrent listeners: SUCCESS or RECONSUME_LATER (the batch comes back later, through the
    group's retry topic). Orderly listeners: SUCCESS or SUSPEND (the queue pauses, then the
    same batch is offered again, in order).
    """

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND = "SUSPEND"


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of a send. Every status means the message is stored on the master.

    For send_batch, msg_id and offset_msg_id hold the ids of all messages joined by commas (as
    RocketMQ does) and queue_offset is the offset of the first; `msg_ids` splits them.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",")


def _as_bytes(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise InvalidParameterError(f"message body must be bytes or str, not {type(body).__name__}")


class Message:
    """A message to send. `keys` is a string or a list of strings; a str body is UTF-8."""

    __slots__ = ("body", "delay_level", "deliver_at_ms", "keys", "properties", "tags", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        deliver_at_ms: int | None = None,
    ) -> None:
        self.topic = topic
        self.body: bytes = _as_bytes(body)
        self.tags = tags or None
        if keys is None:
            self.keys: list[str] = []
        elif isinstance(keys, str):
            self.keys = [keys]
        else:
            self.keys = list(keys)
        self.properties: dict[str, str] = dict(properties) if properties else {}
        self.delay_level = delay_level
        self.deliver_at_ms = deliver_at_ms

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _all_slots(type(self)))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in _all_slots(type(self))
            if name != "body" and getattr(self, name) not in (None, [], {}, 0)
        )
        return f"{type(self).__name__}({shown}, body=<{len(self.body)} bytes>)"


class MessageExt(Message):
    """A message as stored: what a consumer receives. `properties` holds every property,
    the reserved ones (TAGS, KEYS, UNIQ_KEY, traceparent, ...) included, as RocketMQ does.

    Received messages are plain data, and the C decoder keeps them (and their key lists)
    out of the cyclic collector: reference counting frees them. Keep `properties` str to str
    and `keys` a list of str; a message stored inside its own properties would never be
    freed."""

    __slots__ = (
        "born_host",
        "born_timestamp",
        "broker_name",
        "commitlog_offset",
        "flag",
        "msg_id",
        "offset_msg_id",
        "queue",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_timestamp",
        "sysflag",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        deliver_at_ms: int | None = None,
        msg_id: str = "",
        offset_msg_id: str = "",
        queue: MessageQueue | None = None,
        queue_offset: int = 0,
        commitlog_offset: int = 0,
        born_timestamp: int = 0,
        store_timestamp: int = 0,
        born_host: str = "",
        store_host: str = "",
        reconsume_times: int = 0,
        broker_name: str = "",
        flag: int = 0,
        sysflag: int = 0,
    ) -> None:
        super().__init__(topic, body, tags, list(keys), properties, delay_level, deliver_at_ms)
        self.msg_id = msg_id
        self.offset_msg_id = offset_msg_id
        self.queue = queue if queue is not None else MessageQueue(topic, broker_name, 0)
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self.born_host = born_host
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.broker_name = broker_name
        self.flag = flag
        self.sysflag = sysflag

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id


def _all_slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names.extend(getattr(klass, "__slots__", ()))
    return names


def _check(text: str, what: str) -> None:
    for ch in _SEPARATORS:
        if ch in text:
            raise InvalidParameterError(f"{what} contains a reserved separator character ({ch!r})")


def message_properties(msg: Message, msg_id: str) -> dict[str, str]:
    """The properties a message is stored with: the user's, then the reserved ones."""
    props: dict[str, str] = {}
    for key, raw in msg.properties.items():
        value = raw if isinstance(raw, str) else str(raw)
        _check(key, "property name")
        _check(value, f"property {key!r}")
        props[key] = value
    if msg.tags:
        _check(msg.tags, "tags")
        props[record.PROPERTY_TAGS] = msg.tags
    if msg.keys:
        joined = " ".join(msg.keys)
        _check(joined, "keys")
        props[record.PROPERTY_KEYS] = joined
    props[record.PROPERTY_UNIQ_KEY] = msg_id
    if msg.delay_level > 0:
        props[record.PROPERTY_DELAY] = str(msg.delay_level)
    if msg.deliver_at_ms is not None:
        props[record.PROPERTY_TIMER_DELIVER_MS] = str(msg.deliver_at_ms)
    return props


COMPRESS_LEVEL = 5  # zlib level of compressed bodies, as RocketMQ's compressLevel


def compressed_body(body: bytes, compress_over: int) -> tuple[bytes, int]:
    """(body, sysflag): bodies longer than compress_over bytes are zlib-compressed and flagged
    SYSFLAG_COMPRESSED, unless that would not make them smaller. compress_over < 0: never."""
    if compress_over < 0 or len(body) <= compress_over:
        return body, 0
    packed = zlib.compress(body, COMPRESS_LEVEL)
    if len(packed) >= len(body):
        return body, 0
    return packed, record.SYSFLAG_COMPRESSED


def encode_message(
    msg: Message,
    props: Mapping[str, str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """One record in the layout of ferry.protocol.record, ready for a SendMessageRequest."""
    body, sysflag = compressed_body(msg.body, compress_over)
    try:
        return record.encode_record(
            msg.topic.encode(),
            body,
            record.encode_properties(props),
            sysflag=sysflag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
    except record.RecordError as exc:
        raise MessageIllegalError(str(exc)) from None


_UNIQ_PREFIX = f"{record.PROPERTY_UNIQ_KEY}{record.PROP_SEP}"
_TAGS_PREFIX = f"{record.PROPERTY_TAGS}{record.PROP_SEP}"
_KEYS_PREFIX = f"{record.PROPERTY_KEYS}{record.PROP_SEP}"


def encode_plain_message(
    msg: Message, msg_id: str, *, born_timestamp: int, born_host: bytes, compress_over: int = -1
) -> bytes:
    """encode_message for a message without properties of its own, delay or timer (the
    common send): the same bytes, without building the properties dict first."""
    text = f"{_UNIQ_PREFIX}{msg_id}{record.PROP_END}"
    if msg.keys:
        joined = " ".join(msg.keys)
        _check(joined, "keys")
        text = f"{_KEYS_PREFIX}{joined}{record.PROP_END}{text}"
    if msg.tags:
        _check(msg.tags, "tags")
        text = f"{_TAGS_PREFIX}{msg.tags}{record.PROP_END}{text}"
    body, sysflag = compressed_body(msg.body, compress_over)
    try:
        return record.encode_plain(
            record.topic_tail(msg.topic),
            body,
            text.encode(),
            sysflag,
            born_timestamp,
            born_host,
        )
    except record.RecordError as exc:
        raise MessageIllegalError(str(exc)) from None


class PlainMessage(NamedTuple):
    """What send_async keeps of a message without properties of its own, delay or timer
    until its batch is encoded: immutable, so a Message changed after the call cannot alter
    what is sent."""

    body: bytes
    tags: str  # "" when none
    keys: str  # the keys joined by spaces, "" when none
    size: int  # the record's size once encoded (compression can only shrink it)


# The classes' shapes the C code (ferry.native) works with, handed over once below so that it
# holds no attribute name or field order of its own: a MessageExt's attributes in the order
# its decoder takes them (the send side reads the first seven, a Message's), a SendResult's,
# and a PlainMessage's fields, whose positions it is given. test_native_shapes.py checks that
# these name every slot and field.
NATIVE_MESSAGE_FIELDS = (
    *("topic", "body", "tags", "keys", "properties", "delay_level", "deliver_at_ms"),
    *("msg_id", "offset_msg_id", "queue", "queue_offset", "commitlog_offset"),
    *("born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times"),
    *("broker_name", "flag", "sysflag"),
)
NATIVE_RESULT_FIELDS = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset")
NATIVE_PLAIN_FIELDS = ("body", "tags", "keys", "size")
if native.BUILT:
    native.bind_sdk(
        NATIVE_MESSAGE_FIELDS,
        NATIVE_RESULT_FIELDS,
        tuple(PlainMessage._fields.index(name) for name in NATIVE_PLAIN_FIELDS),
    )


# UNIQ_KEY's property bytes besides the 32-digit id, and a record's fixed size besides the
# topic (FIXED_SIZE counts the topic's length byte, which topic_tail() holds)
_UNIQ_SIZE = len(_UNIQ_PREFIX) + 1 + 32
_BASE_SIZE = record.FIXED_SIZE - 1 + _UNIQ_SIZE
MAX_PLAIN_TEXT = 60_000  # tags + keys over this go the general way (which checks 65,535)


def plain_message(msg: Message, tail_len: int) -> PlainMessage | None:
    """A snapshot of `msg` for encode_plain_batch, its tags and keys checked; None when the
    message needs the general path (properties of its own, delay, timer, huge tags/keys).
    In C (ferry.native) where it can; a message C leaves alone (a separator in its tags, a
    body not of bytes) goes through plain_message_py, which says why or takes it."""
    if native.ENABLED:
        found = native.plain_message(msg, _BASE_SIZE + tail_len, MAX_PLAIN_TEXT, PlainMessage)
        if found is not None:
            return cast(PlainMessage, found)
    return plain_message_py(msg, tail_len)


def plain_messages(msgs: list[Message], topic: str, tail_len: int) -> list[PlainMessage] | None:
    """plain_message of each message of a batch of `topic`; None when any needs the general
    path or names another topic (the caller's checks then say which). A separator in tags or
    keys raises, as plain_message does."""
    if native.ENABLED:
        found = native.plain_messages(
            msgs, topic, _BASE_SIZE + tail_len, MAX_PLAIN_TEXT, PlainMessage
        )
        if found is not None:
            return cast(list[PlainMessage], found)
    plain: list[PlainMessage] = []
    for msg in msgs:
        one = plain_message_py(msg, tail_len) if msg.topic == topic else None
        if one is None:
            return None
        plain.append(one)
    return plain


def plain_message_py(msg: Message, tail_len: int) -> PlainMessage | None:
    """plain_message in Python: the reference for the C code."""
    if msg.properties or msg.delay_level > 0 or msg.deliver_at_ms is not None:
        return None
    size = _BASE_SIZE + tail_len + len(msg.body)
    tags = msg.tags or ""
    keys = ""
    if tags:
        _check(tags, "tags")
        size += len(_TAGS_PREFIX) + 1 + len(tags.encode())
    if msg.keys:
        keys = " ".join(msg.keys)
        _check(keys, "keys")
        size += len(_KEYS_PREFIX) + 1 + len(keys.encode())
    if len(tags) + len(keys) > MAX_PLAIN_TEXT:
        return None
    return PlainMessage(msg.body, tags, keys, size)


def encode_plain_batch(
    topic: str,
    msgs: Sequence[PlainMessage],
    ids: Sequence[str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """The records of plain messages of one topic, concatenated: the same bytes as
    encode_message of each (with its id as UNIQ_KEY). In C (ferry.native) unless a body is to
    be compressed; encode_plain_batch_py is the reference."""
    if native.ENABLED:
        out = native.encode_plain_batch(
            record.topic_tail(topic),
            list(msgs),
            list(ids),
            born_timestamp,
            born_host,
            compress_over,
        )
        if out is not None:
            return out
    return encode_plain_batch_py(
        topic,
        msgs,
        ids,
        born_timestamp=born_timestamp,
        born_host=born_host,
        compress_over=compress_over,
    )


def encode_plain_batch_py(
    topic: str,
    msgs: Sequence[PlainMessage],
    ids: Sequence[str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """encode_plain_batch in one Python loop and one join."""
    tail = record.topic_tail(topic)
    fixed = record.FIXED_SIZE - 1 + len(tail)
    pack = record.HEAD.pack
    magic = record.MAGIC
    empty = bytes(8)
    parts: list[bytes] = []
    add = parts.append
    for msg, msg_id in zip(msgs, ids, strict=True):
        text = f"{_UNIQ_PREFIX}{msg_id}{record.PROP_END}"
        if msg.keys:
            text = f"{_KEYS_PREFIX}{msg.keys}{record.PROP_END}{text}"
        if msg.tags:
            text = f"{_TAGS_PREFIX}{msg.tags}{record.PROP_END}{text}"
        props = text.encode()
        body = msg.body
        sysflag = 0
        if 0 <= compress_over < len(body):
            body, sysflag = compressed_body(body, compress_over)
        n_body = len(body)
        n_props = len(props)
        add(
            pack(
                fixed + n_body + n_props,
                magic,
                0,
                0,
                0,
                0,
                0,
                sysflag,
                born_timestamp,
                born_host,
                0,
                empty,
                0,
                0,
                n_body,
            )
        )
        add(body)
        add(tail)
        add(n_props.to_bytes(2, "big"))
        add(props)
    return b"".join(parts)


def _int_property(props: Mapping[str, str], key: str) -> int | None:
    raw = props.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


@functools.lru_cache(maxsize=256)
def host_hex(store_host: str) -> str:
    """The first 16 hex digits of an offset message id (record.offset_msg_id), cached."""
    return record.pack_host(store_host).hex().upper()


_HEAD_UNPACK = record.HEAD.unpack_from
_PREFIX_UNPACK = record.PREFIX.unpack_from


def decode_records(
    buf: Any, broker_name: str, tags: frozenset[str] | None, out: list[MessageExt]
) -> None:
    """Appends the messages of consecutive records in `buf` (a pulled frame) whose TAGS are
    in `tags` (None: all), as decode_message(iter_records(...)) would make them; records of
    other tags are skipped before their body is copied. Raises record.RecordError at the
    first bad record, the ones before it appended.

    The hot path of consumption. The C decoder (ferry.native) takes the plain records and
    stops at any other (blank, compressed, delayed, malformed); decode_records_py takes that
    one and hands back."""
    if type(buf) is not bytes:
        buf = bytes(buf)  # one copy: slices of bytes are cheaper than of a memoryview
    if not native.ENABLED:
        decode_records_py(buf, broker_name, tags, out)
        return
    stop = len(buf)
    pos = 0
    while pos < stop:
        pos = native.decode_records(
            buf, pos, broker_name, tags, out, MessageExt, MessageQueue,
            record.topic_of, record.unpack_host, _host_info,
        )  # fmt: skip
        if pos < stop:
            pos = decode_records_py(buf, broker_name, tags, out, pos, one=True)


def _host_info(raw: bytes) -> tuple[str, str]:
    text = record.unpack_host(raw)
    return text, host_hex(text)


def decode_records_py(
    buf: bytes,
    broker_name: str,
    tags: frozenset[str] | None,
    out: list[MessageExt],
    pos: int = 0,
    *,
    one: bool = False,
) -> int:
    """decode_records in Python from `pos` (the reference for the C decoder); with `one`,
    returns after the first record that is not a blank. Returns where it stopped.

    One struct unpack per record, no intermediate Record, and queues, hosts and offset-id
    prefixes looked up once per frame."""
    stop = len(buf)
    queues: dict[tuple[str, int], MessageQueue] = {}
    hosts: dict[bytes, tuple[str, str]] = {}  # raw store host -> (text, offset id prefix)
    new = MessageExt.__new__
    while pos < stop:
        if stop - pos < record.OFF_BODY:
            size, magic = _PREFIX_UNPACK(buf, pos)
            if magic == record.BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise record.RecordError(f"bad record at {pos}")
        (
            size,
            magic,
            _,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            born_host,
            store_ts,
            store_host,
            reconsume,
            _,
            body_len,
        ) = _HEAD_UNPACK(buf, pos)
        if magic != record.MAGIC:
            if magic == record.BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise record.RecordError(f"bad record at {pos}")
        end = pos + size
        if size < record.FIXED_SIZE or end > stop:
            raise record.RecordError(f"bad record at {pos}")
        at = pos + record.OFF_BODY + body_len
        topic_len = buf[at]
        props = record.decode_properties(buf[at + 3 + topic_len : end])
        tag = props.get(record.PROPERTY_TAGS) or None
        if tags is not None and tag not in tags:
            pos = end
            if one:
                break
            continue
        topic = record.topic_of(buf[at + 1 : at + 1 + topic_len])
        body = buf[pos + record.OFF_BODY : at]
        if sysflag & record.SYSFLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise record.RecordError(
                    f"compressed body at CommitLog offset {phys_offset} is corrupt: {exc}"
                ) from None
        host = hosts.get(store_host)
        if host is None:
            text = record.unpack_host(store_host)
            host = hosts[store_host] = (text, host_hex(text))
        queue = queues.get((topic, queue_id))
        if queue is None:
            queue = queues[(topic, queue_id)] = MessageQueue(topic, broker_name, queue_id)
        offset_id = f"{host[1]}{phys_offset:016X}"
        keys = props.get(record.PROPERTY_KEYS)
        msg = new(MessageExt)
        msg.topic = topic
        msg.body = body
        msg.tags = tag
        msg.keys = keys.split() if keys else []
        msg.properties = props
        msg.delay_level = (
            _int_property(props, record.PROPERTY_DELAY) or 0
            if record.PROPERTY_DELAY in props
            else 0
        )
        msg.deliver_at_ms = (
            _int_property(props, record.PROPERTY_TIMER_DELIVER_MS)
            if record.PROPERTY_TIMER_DELIVER_MS in props
            else None
        )
        msg.msg_id = props.get(record.PROPERTY_UNIQ_KEY) or offset_id
        msg.offset_msg_id = offset_id
        msg.queue = queue
        msg.queue_offset = queue_offset
        msg.commitlog_offset = phys_offset
        msg.born_timestamp = born_ts
        msg.store_timestamp = store_ts
        msg.born_host = record.unpack_host(born_host)
        msg.store_host = host[0]
        msg.reconsume_times = reconsume
        msg.broker_name = broker_name
        msg.flag = flag
        msg.sysflag = sysflag
        out.append(msg)
        pos = end
        if one:
            break
    return pos


def decode_message(rec: record.Record, broker_name: str) -> MessageExt:
    """A stored record (from a pull) as the MessageExt a consumer sees.

    The hot path of consumption: attributes are set directly, without __init__'s checks.
    A compressed body is decompressed; `sysflag` still says it travelled compressed.
    """
    props = rec.properties
    body = rec.body
    if rec.sysflag & record.SYSFLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise record.RecordError(
                f"compressed body at CommitLog offset {rec.phys_offset} is corrupt: {exc}"
            ) from None
    keys = props.get(record.PROPERTY_KEYS)
    offset_id = f"{host_hex(rec.store_host)}{rec.phys_offset:016X}"
    msg = MessageExt.__new__(MessageExt)
    msg.topic = rec.topic
    msg.body = body
    msg.tags = props.get(record.PROPERTY_TAGS) or None
    msg.keys = keys.split() if keys else []
    msg.properties = props
    msg.delay_level = _int_property(props, record.PROPERTY_DELAY) or 0
    msg.deliver_at_ms = _int_property(props, record.PROPERTY_TIMER_DELIVER_MS)
    msg.msg_id = props.get(record.PROPERTY_UNIQ_KEY) or offset_id
    msg.offset_msg_id = offset_id
    msg.queue = MessageQueue(rec.topic, broker_name, rec.queue_id)
    msg.queue_offset = rec.queue_offset
    msg.commitlog_offset = rec.phys_offset
    msg.born_timestamp = rec.born_timestamp
    msg.store_timestamp = rec.store_timestamp
    msg.born_host = rec.born_host
    msg.store_host = rec.store_host
    msg.reconsume_times = rec.reconsume_times
    msg.broker_name = broker_name
    msg.flag = rec.flag
    msg.sysflag = rec.sysflag
    return msg
