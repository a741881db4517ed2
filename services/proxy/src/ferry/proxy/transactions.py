"""Transactions of gRPC producers: the half message, EndTransaction, and the broker's checks
relayed down the Telemetry stream of a producer of the topic.

A gRPC producer names no group. As RocketMQ 5's proxy, the topic's name stands for it: a half
message is stored with the topic as its producer group (the group the broker checks and an
end must name), and the proxy heartbeats, as producers of those groups, the topics of the gRPC
producers whose Telemetry streams are open here. A check the broker sends for such a group goes
to one of them as RecoverOrphanedTransactionCommand; the client answers with EndTransaction
(source SERVER_CHECK).

The transaction id a client gets is a token like receipts.py's, so the proxy keeps nothing:
"T1" + base64url of the half message's broker, CommitLog offset, queue offset, message id and
Ferry transaction id. A forged one names a record the broker refuses to end (not a half
message, or of another group or topic)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from msgspec.structs import replace

from ferry.client.aio import Producer
from ferry.client.aio.instance import AsyncClientInstance
from ferry.client.heartbeats import stamped
from ferry.client.message import Message, MessageExt, SendResult
from ferry.client.outgoing import Outgoing
from ferry.client.publish import Target
from ferry.client.transaction import (
    END_TIMEOUT_S,
    EndCall,
    LocalTransactionState,
    half_message,
    readable_check,
    trace_context,
)
from ferry.protocol import record
from ferry.protocol.codes import SendStatus
from ferry.protocol.errors import FerryError, InvalidParameterError, QueryNotFoundError
from ferry.protocol.messages import (
    AnyReply,
    CheckTransactionStateNotice,
    ClusterInfoReply,
    EndTransactionRequest,
    GetClusterInfoRequest,
    HeartbeatRequest,
    SendMessageRequest,
)
from ferry.protocol.names import check_group
from ferry.proxy import convert, delivery
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType, Pb, definition, status
from ferry.proxy.protocol import service as service_pb
from ferry.proxy.system_keys import NOT_USER

log = logging.getLogger("ferry.proxy.transactions")

GROUP = "FERRY_PROXY_TX_PRODUCER"  # the producer that sends halves; not a half's group
PREFIX = "T1"
MAX_TOKEN = 1024
MAX_STREAMS = 10_000
MAX_PUSHED = 1000  # checks waiting on one stream; the broker asks again later
RESOLUTIONS = {1: LocalTransactionState.COMMIT, 2: LocalTransactionState.ROLLBACK}
SOURCE_SERVER_CHECK = 2
_SEP = "\n"


class TxToken(NamedTuple):
    """What ends a half message, carried by the transaction id the client is given."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    transaction_id: str


def encode(token: TxToken) -> str:
    raw = _SEP.join(str(part) for part in token).encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: str) -> TxToken:
    """The token a client's transaction id is; ProxyError INVALID_TRANSACTION_ID if none."""
    if not text or len(text) > MAX_TOKEN or not text.startswith(PREFIX):
        raise _invalid("the transaction id is not one this proxy gave")
    body = text[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        broker, phys, queue_offset, msg_id, tx_id = raw.decode("utf-8").split(_SEP)
        token = TxToken(broker, int(phys), int(queue_offset), msg_id, tx_id)
    except (binascii.Error, ValueError):
        raise _invalid("the transaction id is garbled") from None
    offsets = (token.commit_log_offset, token.queue_offset)
    if not broker or not broker.isprintable() or not all(0 <= o < 1 << 63 for o in offsets):
        raise _invalid("the transaction id is garbled")
    return token


def _invalid(message: str) -> ProxyError:
    return ProxyError(Code.INVALID_TRANSACTION_ID, message)


class HalfProducer(Producer):
    """The SDK's producer, sending halves with their topic as the producer group, and
    heartbeating as a producer of the topics' groups (`groups`, kept by Transactions)."""

    def __init__(self, namesrv: str, **options: Any) -> None:
        super().__init__(GROUP, namesrv, **options)
        self.groups: set[str] = set()
        self.masters: dict[str, str] = {}  # broker name -> master, from the cluster info

    async def send_half(self, msg: Message) -> SendResult:
        out = self._encoder().prepare([half_message(msg, msg.topic)])
        return await self._send_alone(out._replace(batchable=False, transactional=True))

    def _request(self, out: Outgoing, target: Target) -> SendMessageRequest:
        req = super()._request(out, target)
        # the broker stores the request's group as the half's: the topic, as RocketMQ 5's proxy
        return replace(req, producer_group=out.topic) if out.transactional else req

    async def heartbeat(self) -> None:
        """To every master of the name servers' clusters: any may hold halves to check."""
        inst = self._started()
        try:
            info = await inst.routes.namesrv_request(GetClusterInfoRequest(), ClusterInfoReply)
        except FerryError as err:
            log.debug("cluster info for heartbeats not fetched: %s", err)
        else:
            self.masters = {
                name: data.broker_addrs[0]
                for name, data in info.brokers.items()
                if 0 in data.broker_addrs
            }
        addrs = set(inst.routes.master_addrs().values()) | set(self.masters.values())
        for addr in addrs:
            await self._heartbeat_to(addr)

    async def _heartbeat_to(self, addr: str) -> None:
        inst = self._instance
        if inst is None:
            return
        groups = sorted({self.group, *self.groups})
        body = HeartbeatRequest(client_id=inst.client_id, producer_groups=groups)
        try:
            await inst.connection(addr).request(stamped(body, inst), timeout_s=inst.api_timeout_s)
        except FerryError as err:
            log.debug("heartbeat to %s failed: %s", addr, err)

    async def _leave(self, inst: AsyncClientInstance) -> None:
        # a heartbeat naming only the proxy's group, which the unregistering then removes:
        # the brokers no longer send this client checks
        self.groups = set()
        await self.heartbeat()
        await super()._leave(inst)

    def on_notice(self, listener: Callable[[str, AnyReply], None]) -> None:
        self._started().on_notice(listener)

    def heartbeat_soon(self) -> None:
        """A heartbeat now, in a task: new groups are known to the brokers at once."""
        self._started().spawn(self.heartbeat())

    async def fetch_route(self, topic: str) -> None:
        await self._started().routes.fetch_route(topic)

    def check_message(self, notice: CheckTransactionStateNotice, address: str) -> MessageExt | None:
        return readable_check(notice, self._started().routes, address)

    async def end(
        self, addr: str, body: EndTransactionRequest, state: LocalTransactionState
    ) -> None:
        """Sends an end, in its span (a failure is raised: the client is answered with it)."""
        inst = self._started()
        span = inst.tracing.start_transaction(
            "end_transaction", body.producer_group, body.msg_id, state.name, {}
        )
        call = EndCall(addr, body, span, *trace_context(inst.tracing, span))
        try:
            await inst.connection(addr).request(
                body,
                timeout_s=END_TIMEOUT_S,
                traceparent=call.traceparent,
                tracestate=call.tracestate,
            )
        except FerryError as err:
            call.finish(inst.tracing, err)
            raise
        call.finish(inst.tracing, None)

    def broker_addr(self, broker_name: str) -> str | None:
        inst = self._started()
        return inst.routes.addr_of(broker_name) or self.masters.get(broker_name)

    def broker_name(self, address: str) -> str | None:
        known = {**self.masters, **self._started().routes.master_addrs()}
        return next((name for name, addr in known.items() if addr == address), None)


@dataclass
class _Stream:
    """A client's open Telemetry stream: what is pushed down it, and its topics."""

    pushed: asyncio.Queue[tuple[Pb, bool] | None]
    topics: set[str] = field(default_factory=set)


class Transactions:
    def __init__(self, producer: HalfProducer) -> None:
        self._producer = producer
        self._streams: dict[str, _Stream] = {}
        self._turn = 0

    def start(self) -> None:
        """After the producer's start: its broker notices come here."""
        self._producer.on_notice(self._on_notice)

    # ---- the clients' streams ----

    def stream_opened(self, client_id: str) -> asyncio.Queue[tuple[Pb, bool] | None]:
        if client_id not in self._streams and len(self._streams) >= MAX_STREAMS:
            self._streams.pop(next(iter(self._streams)))  # the oldest goes
        stream = _Stream(asyncio.Queue())
        self._streams[client_id] = stream
        return stream.pushed

    def stream_closed(self, client_id: str, pushed: asyncio.Queue[Any]) -> None:
        stream = self._streams.get(client_id)
        if stream is not None and stream.pushed is pushed:  # not a newer stream's
            del self._streams[client_id]
            # the next heartbeat (it names all of them) leaves the groups no one here serves
            self._producer.groups = self._topics()

    def _topics(self) -> set[str]:
        return {topic for stream in self._streams.values() for topic in stream.topics}

    def settings_seen(self, client_id: str, settings: Pb) -> None:
        """A producer's Settings name its topics: it can answer their checks."""
        if settings.WhichOneof("pub_sub") != "publishing":
            return
        self._add_topics(client_id, [convert.topic_name(t) for t in settings.publishing.topics])

    def sender(self, client_id: str) -> ClientHalves:
        """The half sender for a client's SendMessage."""
        return ClientHalves(self, client_id)

    def _add_topics(self, client_id: str, topics: list[str]) -> None:
        stream = self._streams.get(client_id)
        if stream is None:
            return
        for topic in topics:
            try:
                check_group(topic)
            except FerryError:
                continue  # a topic that cannot be a group: its halves are refused anyway
            stream.topics.add(topic)
        served = self._topics()
        if served - self._producer.groups:
            self._producer.groups = served
            self._producer.heartbeat_soon()  # so that checks find us at once

    # ---- halves and ends ----

    async def send_half(self, client_id: str, msg: Message) -> tuple[SendResult, str]:
        try:
            check_group(msg.topic)
        except FerryError as err:
            raise ProxyError(Code.ILLEGAL_TOPIC, f"no transactions on it: {err}") from None
        self._add_topics(client_id, [msg.topic])
        sent = await self._producer.send_half(msg)
        _, phys = record.decode_offset_msg_id(sent.offset_msg_id)
        token = TxToken(sent.queue.broker_name, phys, sent.queue_offset, sent.msg_id, sent.msg_id)
        if sent.status is not SendStatus.SEND_OK:
            # stored, but not as safely as asked: rolled back, as the SDK's producers do
            await self._end(msg.topic, token, LocalTransactionState.ROLLBACK, check=False)
            raise ProxyError(
                Code.INTERNAL_SERVER_ERROR,
                f"the half message was stored as {sent.status.name} and rolled back",
            )
        return sent, encode(token)

    async def end(self, request: Pb) -> Pb:
        """EndTransaction: the client's outcome (an unspecified resolution changes nothing)."""
        topic = delivery.checked_topic(request.topic)
        token = decode(str(request.transaction_id))
        state = RESOLUTIONS.get(int(request.resolution), LocalTransactionState.UNKNOWN)
        check = int(request.source) == SOURCE_SERVER_CHECK
        await self._end(topic, token, state, check=check)
        return service_pb.EndTransactionResponse(status=status(Code.OK, convert.OK_STATUS_TEXT))

    async def _end(
        self, topic: str, token: TxToken, state: LocalTransactionState, *, check: bool
    ) -> None:
        producer = self._producer
        addr = producer.broker_addr(token.broker_name)
        if addr is None:
            await producer.fetch_route(topic)
            addr = producer.broker_addr(token.broker_name)
        if addr is None:
            raise ProxyError(
                Code.INVALID_TRANSACTION_ID, f"broker {token.broker_name!r} is not known"
            )
        body = EndTransactionRequest(
            producer_group=topic,
            commit_log_offset=token.commit_log_offset,
            resolution=state.resolution,
            tran_state_table_offset=token.queue_offset,
            msg_id=token.msg_id,
            transaction_id=token.transaction_id,
            from_transaction_check=check,
            topic=topic,
        )
        try:
            await producer.end(addr, body, state)
        except (InvalidParameterError, QueryNotFoundError) as err:
            # what the broker refuses here came from the token: no half of this topic there
            raise ProxyError(Code.INVALID_TRANSACTION_ID, err.message) from None

    # ---- the broker's checks ----

    def _on_notice(self, address: str, body: AnyReply) -> None:
        if not isinstance(body, CheckTransactionStateNotice):
            return
        candidates = [s for s in self._streams.values() if body.producer_group in s.topics]
        if not candidates:
            log.info("check of %s: no producer of %s here", body.msg_id, body.producer_group)
            return
        msg = self._producer.check_message(body, address)
        broker = self._producer.broker_name(address)
        if msg is None or broker is None:
            log.warning("check of %s from %s cannot be relayed", body.msg_id, address)
            return
        self._turn += 1
        stream = candidates[self._turn % len(candidates)]
        token = TxToken(
            broker,
            body.commit_log_offset,
            body.tran_state_table_offset,
            body.msg_id,
            body.transaction_id,
        )
        command = service_pb.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb.RecoverOrphanedTransactionCommand(
                message=checked_message(msg), transaction_id=encode(token)
            )
        )
        if stream.pushed.qsize() >= MAX_PUSHED:
            log.warning("check of %s dropped: the client reads none of its stream", body.msg_id)
            return
        stream.pushed.put_nowait((command, False))


class ClientHalves:
    """sending.HalfSender for one client: its halves make it a producer of their topics."""

    def __init__(self, transactions: Transactions, client_id: str) -> None:
        self._transactions = transactions
        self._client_id = client_id

    async def send_half(self, msg: Message) -> tuple[SendResult, str]:
        return await self._transactions.send_half(self._client_id, msg)


def checked_message(msg: MessageExt) -> Pb:
    """The client's Message for a half message the broker checks (its real topic)."""
    out = definition.Message(body=msg.body)
    namespace, sep, name = msg.topic.partition("%")
    out.topic.CopyFrom(
        definition.Resource(name=name, resource_namespace=namespace)
        if sep
        else definition.Resource(name=msg.topic)
    )
    for key, value in msg.properties.items():
        if key not in NOT_USER:
            out.user_properties[key] = value
    sp = out.system_properties
    if msg.tags:
        sp.tag = msg.tags
    sp.keys.extend(msg.keys)
    sp.message_id = msg.properties.get(record.PROPERTY_UNIQ_KEY) or msg.msg_id
    sp.message_type = int(MessageType.TRANSACTION)
    sp.body_digest.type = int(DigestType.CRC32)
    sp.body_digest.checksum = convert.body_digest(msg.body)
    sp.body_encoding = int(Encoding.IDENTITY)
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.born_host = msg.born_host
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    sp.store_host = msg.store_host
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    return out


async def interleave(
    commands: AsyncIterator[Pb], pushed: asyncio.Queue[tuple[Pb, bool] | None]
) -> AsyncIterator[tuple[Pb, bool]]:
    """The client's commands (True) and the ones pushed to it (False) as they come, until
    the client's end; a failure reading the client's is raised."""

    async def read() -> None:
        try:
            async for command in commands:
                pushed.put_nowait((command, True))
        finally:
            pushed.put_nowait(None)

    reader = asyncio.ensure_future(read())
    try:
        while (item := await pushed.get()) is not None:
            yield item
        await reader
    finally:
        reader.cancel()
