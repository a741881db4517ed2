"""The proxy's values to and from the generated messages: what a client sent, read into typed
values, and the replies built from typed values. No I/O."""

from __future__ import annotations

import hashlib
import ipaddress
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from ferry.proxy.protocol import Code, DigestType, Pb, definition, status
from ferry.proxy.protocol import service as service_pb

OK_STATUS_TEXT = "OK"


@dataclass(frozen=True)
class Inbound:
    """One message of a SendMessageRequest, as the client sent it."""

    topic: str  # with its namespace prefix ("ns%topic") when the client named one
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    message_id: str
    message_type: int
    user_properties: dict[str, str]
    message_group: str | None
    delivery_seconds: int | None
    digest: tuple[int, str] | None  # (DigestType, checksum) when the client set one
    encoding: int


@dataclass(frozen=True)
class RouteQueue:
    """One queue of a QueryRoute reply; its broker is the proxy itself (id 0)."""

    broker_name: str
    queue_id: int
    permission: int
    accept_message_types: tuple[int, ...]


@dataclass(frozen=True)
class SendEntry:
    """The outcome of one message of a SendMessage."""

    code: Code
    message: str
    message_id: str
    offset: int = 0
    transaction_id: str = ""  # a half message's: what the client ends the transaction with


@dataclass(frozen=True)
class ServerSettings:
    """What the proxy answers a client's Settings with (the client applies them as given: a
    max_body_size of 0 would refuse every send)."""

    max_body_size: int
    send_attempts: int = 3
    send_backoff_ms: tuple[int, int] = (10, 1000)  # initial, max; doubled each attempt
    receive_batch_size: int = 32
    long_polling_ms: int = 20_000
    consume_attempts: int = 17  # the first delivery and 16 retries, as RocketMQ's groups
    consume_backoff_ms: tuple[int, ...] = ()  # the delay before each retry


def topic_name(resource: Pb) -> str:
    """A Resource's name, in RocketMQ's namespaced form ("ns%name") when it has a namespace."""
    namespace = str(resource.resource_namespace)
    return f"{namespace}%{resource.name}" if namespace else str(resource.name)


def inbound(msg: Pb) -> Inbound:
    sp = msg.system_properties
    digest = None
    if sp.HasField("body_digest"):
        digest = (int(sp.body_digest.type), str(sp.body_digest.checksum))
    return Inbound(
        topic=topic_name(msg.topic),
        body=bytes(msg.body),
        tag=str(sp.tag) if sp.HasField("tag") else None,
        keys=tuple(str(k) for k in sp.keys),
        message_id=str(sp.message_id),
        message_type=int(sp.message_type),
        user_properties={str(k): str(v) for k, v in msg.user_properties.items()},
        message_group=str(sp.message_group) if sp.HasField("message_group") else None,
        delivery_seconds=(
            int(sp.delivery_timestamp.seconds) if sp.HasField("delivery_timestamp") else None
        ),
        digest=digest,
        encoding=int(sp.body_encoding),
    )


def body_digest(body: bytes, kind: DigestType = DigestType.CRC32) -> str:
    """The checksum the client compares a body with: upper-case hex (CRC32 in 8 digits)."""
    if kind is DigestType.CRC32:
        return f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"
    if kind is DigestType.MD5:
        return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
    return hashlib.sha1(body, usedforsecurity=False).hexdigest().upper()


def endpoints(host: str, port: int) -> Pb:
    """An Endpoints naming one address, with the scheme its host is written in."""
    try:
        scheme = 1 if ipaddress.ip_address(host).version == 4 else 2  # IPv4, IPv6
    except ValueError:
        scheme = 3  # DOMAIN_NAME
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host, port=port)])


def route_response(topic: Pb, queues: Sequence[RouteQueue], where: Pb) -> Pb:
    """QueryRoute's reply: `topic` as the client named it, every queue on `where`."""
    reply = service_pb.QueryRouteResponse(status=status(Code.OK, OK_STATUS_TEXT))
    for queue in queues:
        mq = reply.message_queues.add()
        mq.topic.CopyFrom(topic)
        mq.id = queue.queue_id
        mq.permission = queue.permission
        mq.broker.name = queue.broker_name
        mq.broker.id = 0
        mq.broker.endpoints.CopyFrom(where)
        mq.accept_message_types.extend(queue.accept_message_types)
    return reply


def send_response(entries: Sequence[SendEntry]) -> Pb:
    """SendMessage's reply: OK when every message is stored; one message's own status when it
    was alone; MULTIPLE_RESULTS when a batch's outcomes differ."""
    reply = service_pb.SendMessageResponse()
    for entry in entries:
        reply.entries.add(
            status=status(entry.code, entry.message),
            message_id=entry.message_id,
            offset=entry.offset,
            transaction_id=entry.transaction_id,
        )
    if all(entry.code is Code.OK for entry in entries):
        reply.status.CopyFrom(status(Code.OK, OK_STATUS_TEXT))
    elif len(entries) == 1:
        reply.status.CopyFrom(status(entries[0].code, entries[0].message))
    else:
        failed = sum(entry.code is not Code.OK for entry in entries)
        reply.status.CopyFrom(
            status(Code.MULTIPLE_RESULTS, f"{failed} of {len(entries)} messages failed")
        )
    return reply


def settings_command(
    client: Pb, server: ServerSettings, consume_attempts: int = 0, fifo: bool = False
) -> Pb:
    """The Telemetry reply to a client's Settings: the client's own, with the values the
    server decides (the push consumer reads only this first reply: it carries everything).
    A consumer's max_attempts is its group's (`consume_attempts`: retryMaxTimes + 1), or the
    server's default when 0; its back-off is customized (the PushConsumer of RocketMQ's
    Python client reads no other kind for consumers): the delay before each retry, the last
    one repeated. `fifo`: the group is orderly (consumeMessageOrderly)."""
    settings = definition.Settings()
    settings.CopyFrom(client)
    settings.ClearField("backoff_policy")
    policy = settings.backoff_policy
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        settings.publishing.max_body_size = server.max_body_size
        settings.publishing.validate_message_type = True
        policy.max_attempts = server.send_attempts
        policy.exponential_backoff.initial.FromMilliseconds(server.send_backoff_ms[0])
        policy.exponential_backoff.max.FromMilliseconds(server.send_backoff_ms[1])
        policy.exponential_backoff.multiplier = 2.0
    elif kind == "subscription":
        sub = settings.subscription
        sub.fifo = fifo
        sub.receive_batch_size = server.receive_batch_size
        sub.long_polling_timeout.FromMilliseconds(server.long_polling_ms)
        policy.max_attempts = consume_attempts if consume_attempts > 0 else server.consume_attempts
        for delay_ms in server.consume_backoff_ms:
            policy.customized_backoff.next.add().FromMilliseconds(delay_ms)
    return service_pb.TelemetryCommand(status=status(Code.OK, OK_STATUS_TEXT), settings=settings)
