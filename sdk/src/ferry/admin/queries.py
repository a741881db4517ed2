"""Message queries behind mqadmin's queryMsgById, queryMsgByKey, queryMsgByUniqueKey,
queryMsgByOffset and printMsg, and Admin.pull: functions of a started BrokerLocator (an Admin).

By key and by unique key, every broker of the topic asks its index (QUERY_MESSAGE) and the
answers are merged, newest first. An offset message id names the broker and the CommitLog
offset, so it is read without any index (VIEW_MESSAGE_BY_ID). By queue offset and by time, the
messages are pulled from their queues.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import msgspec

from ferry.admin.locator import MASTER_ID, BrokerLocator
from ferry.admin.offsets import search_offset
from ferry.client.consume_state import parse_tags
from ferry.client.message import MessageExt, MessageQueue
from ferry.client.message_decode import decode_message
from ferry.client.message_selector import Expression, wire_expression
from ferry.client.transport import Result, expect, wait
from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BrokerNotExistError,
    InvalidParameterError,
    QueryNotFoundError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    MAX_QUERY_MS,
    PullMessageReply,
    PullMessageRequest,
    QueryMessageReply,
    QueryMessageRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import check_topic

DEFAULT_MAX_NUM = 32  # RocketMQ's defaultQueryMaxNum
MAX_NUM = 1000  # what a broker answers at most per query
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # the group admin reads pull with, as mqadmin's
PRINT_BATCH = 256


def _records(
    payload: list[Any], broker_name: str, tags: frozenset[str] | None = None
) -> list[MessageExt]:
    """The pulled records; with tags, only those whose tag is one of them (the broker
    filtered by tag hash, which can collide)."""
    if not payload:
        return []
    msgs = [decode_message(r, broker_name) for r in record.iter_records(bytes(payload[0]))]
    return msgs if tags is None else [m for m in msgs if m.tags in tags]


def _newest_first(msgs: list[MessageExt]) -> list[MessageExt]:
    return sorted(msgs, key=lambda m: (m.store_timestamp, m.commitlog_offset), reverse=True)


def _masters(brokers: BrokerLocator, topic: str) -> dict[str, str]:
    """broker name -> master address, of every broker serving `topic`."""
    route = brokers.topic_route(topic)
    out: dict[str, str] = {}
    for data in route.broker_datas:
        addr = data.broker_addrs.get(MASTER_ID)
        if addr:
            out[data.broker_name] = addr
    return out


def query_msg_by_key(
    brokers: BrokerLocator,
    topic: str,
    key: str,
    *,
    max_num: int = DEFAULT_MAX_NUM,
    begin_ms: int = 0,
    end_ms: int = MAX_QUERY_MS,
    unique: bool = False,
) -> list[MessageExt]:
    """Messages of `topic` whose KEYS hold `key` (or, unique, whose msg_id is `key`), stored
    within [begin_ms, end_ms]: newest first, at most max_num, from every broker of the topic."""
    check_topic(topic)
    if not key:
        raise InvalidParameterError("the key is empty")
    if not 1 <= max_num <= MAX_NUM:
        raise InvalidParameterError(f"max_num must be within 1..{MAX_NUM}")
    body = QueryMessageRequest(
        topic=topic, key=key, unique=unique, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num
    )
    return _ask_indexes(brokers, {topic: _masters(brokers, topic)}, body)


def _ask_indexes(
    brokers: BrokerLocator, masters: dict[str, dict[str, str]], body: QueryMessageRequest
) -> list[MessageExt]:
    """Asks `body` of the index of every master of each topic (topic -> broker name ->
    address), all at once; the answers merged, newest first, at most body.max_num."""
    inst = brokers.instance()
    asked: list[tuple[str, str, Future[Result]]] = []
    for topic, by_name in sorted(masters.items()):
        question = msgspec.structs.replace(body, topic=topic)
        for name, addr in sorted(by_name.items()):
            future = inst.connection(addr).submit(question, timeout_s=inst.api_timeout_s)
            asked.append((name, addr, future))
    found: list[MessageExt] = []
    for name, addr, future in asked:
        result = wait(future, inst.api_timeout_s, addr)
        expect(result, QueryMessageReply)
        found.extend(_records(result[1], name))
    return _newest_first(found)[: body.max_num]


def query_msg_by_unique_key(
    brokers: BrokerLocator,
    topic: str,
    msg_id: str,
    *,
    max_num: int = DEFAULT_MAX_NUM,
    begin_ms: int = 0,
    end_ms: int = MAX_QUERY_MS,
) -> list[MessageExt]:
    """Every stored copy of the message whose client msg_id (UNIQ_KEY) is msg_id, newest
    first (a message sent again after a timeout is stored twice)."""
    return query_msg_by_key(
        brokers, topic, msg_id, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms, unique=True
    )


def _broker_names(brokers: BrokerLocator) -> dict[str, tuple[str, str]]:
    """address -> (broker name, its Ferry address), of every broker the name servers know.
    A broker with a RocketMQ door stores its records under the door's address (the store
    host of its offset message ids): that address names it too."""
    info = brokers.cluster_info()
    names: dict[str, tuple[str, str]] = {}
    for name, data in info.brokers.items():
        for broker_id, addr in data.broker_addrs.items():
            names[addr] = (name, addr)
            door = data.rocketmq_addrs.get(broker_id)
            if door:
                names[door] = (name, addr)
    return names


def view_message(brokers: BrokerLocator, offset_msg_id: str) -> MessageExt:
    """The message an offset message id names, read from its broker without any index."""
    try:
        addr, phys_offset = record.decode_offset_msg_id(offset_msg_id)
    except record.RecordError as exc:
        raise InvalidParameterError(str(exc)) from None
    names = _broker_names(brokers)
    if addr not in names:
        raise BrokerNotExistError(f"{offset_msg_id} names broker {addr}, which is not registered")
    name, ferry_addr = names[addr]
    return _view(brokers, ferry_addr, name, phys_offset)


def _view(brokers: BrokerLocator, addr: str, broker_name: str, phys_offset: int) -> MessageExt:
    inst = brokers.instance()
    result = inst.connection(addr).request(
        ViewMessageRequest(phys_offset=phys_offset), timeout_s=inst.api_timeout_s
    )
    expect(result, ViewMessageReply)
    msgs = _records(result[1], broker_name)
    if not msgs:
        raise QueryNotFoundError(f"no message at CommitLog offset {phys_offset} of {addr}")
    return msgs[0]


def query_msg_by_id(
    brokers: BrokerLocator, msg_id: str, topic: str | None = None
) -> list[MessageExt]:
    """As mqadmin's queryMsgById: msg_id is tried as an offset message id (broker address +
    CommitLog offset, read without any index), then as a client msg id (the UNIQ_KEY a send
    result calls msg_id), looked up in the index of `topic`'s brokers, or of every topic's
    when no topic is given. Every stored copy is returned, newest first."""
    try:
        addr, phys_offset = record.decode_offset_msg_id(msg_id)
    except record.RecordError:
        addr, phys_offset = "", -1
    names = _broker_names(brokers)
    if addr in names:
        try:
            name, ferry_addr = names[addr]
            return [_view(brokers, ferry_addr, name, phys_offset)]
        except (QueryNotFoundError, InvalidParameterError):
            pass  # a client msg id that happens to decode to a broker's address
    if topic is not None:
        check_topic(topic)
    masters: dict[str, dict[str, str]] = {}
    for name in [topic] if topic is not None else brokers.topic_list():
        try:
            masters[name] = _masters(brokers, name)
        except TopicNotExistError:
            if topic is not None:
                raise
            # listed, but deleted since: nothing of it to find
    body = QueryMessageRequest(topic="", key=msg_id, unique=True)
    found = _ask_indexes(brokers, masters, body)
    if not found:
        where = f"topic {topic}" if topic is not None else f"any of {len(masters)} topics"
        raise QueryNotFoundError(
            f"{msg_id} is neither the offset message id of a stored message nor the msg id "
            f"of a message of {where}"
        )
    return found


def _pull(
    brokers: BrokerLocator,
    queue: MessageQueue,
    offset: int,
    max_msgs: int,
    group: str = TOOLS_CONSUMER_GROUP,
    expression: Expression = "*",
) -> tuple[Any, list[Any]]:
    inst = brokers.instance()
    expression_type, text = wire_expression(expression)
    body = PullMessageRequest(
        consumer_group=group,
        topic=queue.topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_msgs=max_msgs,
        expression=text,
        expression_type=expression_type,
    )
    result = inst.connection(brokers.queue_addr(queue)).request(body, timeout_s=inst.api_timeout_s)
    return expect(result, PullMessageReply), result[1]


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull of a queue from a given offset, outside any consumer (Admin.pull).

    status OFFSET_ILLEGAL: the offset lies outside [min_offset, max_offset], for instance
    because retention deleted it; next_begin_offset is then the nearest valid offset."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


def pull(
    brokers: BrokerLocator,
    queue: MessageQueue,
    offset: int,
    max_msgs: int = 32,
    group: str = TOOLS_CONSUMER_GROUP,
    expression: Expression = "*",
) -> PullResult:
    """The messages of `queue` from `offset` on (at most max_msgs), without long polling;
    with an expression, only those it selects (NO_MATCHED_MSG: none up to next_begin_offset)."""
    if offset < 0 or max_msgs <= 0:
        raise InvalidParameterError(f"bad pull of {queue}: offset {offset}, max {max_msgs}")
    reply, payload = _pull(brokers, queue, offset, max_msgs, group, expression)
    status = PullStatus(reply.status)
    tags = parse_tags(expression)
    msgs = _records(payload, queue.broker_name, tags) if status == PullStatus.FOUND else []
    return PullResult(status, reply.next_begin_offset, reply.min_offset, reply.max_offset, msgs)


def query_msg_by_offset(brokers: BrokerLocator, queue: MessageQueue, offset: int) -> MessageExt:
    """The message at `offset` of `queue`."""
    reply, payload = _pull(brokers, queue, offset, 1)
    msgs = _records(payload, queue.broker_name) if reply.status == PullStatus.FOUND else []
    if not msgs or msgs[0].queue_offset != offset:
        raise QueryNotFoundError(
            f"no message at offset {offset} of {queue} "
            f"(it holds {reply.min_offset}..{reply.max_offset - 1})"
        )
    return msgs[0]


def print_msg(
    brokers: BrokerLocator, topic: str, begin_ms: int = 0, end_ms: int = MAX_QUERY_MS
) -> Iterator[MessageExt]:
    """Every message of `topic` stored within [begin_ms, end_ms], queue by queue in offset
    order (mqadmin printMsg)."""
    if begin_ms > end_ms:
        raise InvalidParameterError(f"begin {begin_ms} is after end {end_ms}")
    for queue in brokers.queues(topic):
        offset = search_offset(brokers, queue, begin_ms)
        stop = search_offset(brokers, queue, end_ms + 1) if end_ms < MAX_QUERY_MS else None
        while stop is None or offset < stop:
            want = PRINT_BATCH if stop is None else min(PRINT_BATCH, stop - offset)
            reply, payload = _pull(brokers, queue, offset, want)
            if reply.status == PullStatus.OFFSET_ILLEGAL and reply.next_begin_offset > offset:
                offset = reply.next_begin_offset  # retention moved the queue's start
                continue
            if reply.status != PullStatus.FOUND:
                break
            for msg in _records(payload, queue.broker_name):
                if begin_ms <= msg.store_timestamp <= end_ms:
                    yield msg
            offset = reply.next_begin_offset
