"""What users send and receive: messages, queues and send results, and the shapes of these
classes that the C code (ferry.native) is handed. How a message becomes a CommitLog record is
ferry.client.message_encode's; how a pulled frame becomes messages, ferry.client.message_decode's.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ferry import native
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import InvalidParameterError

__all__ = [
    "ConsumeFromWhere",
    "ConsumeResult",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "PlainMessage",
    "SendResult",
    "SendStatus",
]


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
