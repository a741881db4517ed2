"""Queue and consumer offsets: min/max offsets, a group's committed offsets, the offset of a
time (searchOffset), and the commands that move a group's offsets (resetOffsetByTime,
skipAccumulatedMessage, cloneGroupOffset). The brokers tell a moved group's live members,
which go on from the new offsets."""

from __future__ import annotations

from collections.abc import Callable

from ferry.admin.locator import BrokerLocator
from ferry.client.message import MessageQueue
from ferry.protocol.errors import (
    BrokerNotExistError,
    InvalidParameterError,
    QueryNotFoundError,
    SubscriptionGroupNotExistError,
)
from ferry.protocol.messages import (
    AnyRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    OffsetEntry,
    OffsetReply,
    OkReply,
    QueryConsumerOffsetRequest,
    ResetOffsetReply,
    ResetOffsetRequest,
    SearchOffsetByTimestampRequest,
    UpdateConsumerOffsetRequest,
)
from ferry.protocol.names import check_group, check_topic

Progress = Callable[[int, int], None]  # (done, total)


def _offset(brokers: BrokerLocator, queue: MessageQueue, body: AnyRequest) -> int:
    return brokers.broker_request(brokers.queue_addr(queue), body, OffsetReply).offset


def max_offset(brokers: BrokerLocator, queue: MessageQueue) -> int:
    return _offset(brokers, queue, GetMaxOffsetRequest(topic=queue.topic, queue_id=queue.queue_id))


def min_offset(brokers: BrokerLocator, queue: MessageQueue) -> int:
    return _offset(brokers, queue, GetMinOffsetRequest(topic=queue.topic, queue_id=queue.queue_id))


def search_offset(brokers: BrokerLocator, queue: MessageQueue, timestamp_ms: int) -> int:
    """The first offset of `queue` stored at or after timestamp_ms (its max offset if none)."""
    body = SearchOffsetByTimestampRequest(
        topic=queue.topic, queue_id=queue.queue_id, timestamp_ms=timestamp_ms
    )
    return _offset(brokers, queue, body)


def consumer_offset(brokers: BrokerLocator, group: str, queue: MessageQueue) -> int | None:
    """The group's committed offset of `queue`; None when it has none."""
    check_group(group)
    body = QueryConsumerOffsetRequest(group, queue.topic, queue.queue_id)
    try:
        return _offset(brokers, queue, body)
    except QueryNotFoundError:
        return None


def update_consumer_offset(
    brokers: BrokerLocator, group: str, queue: MessageQueue, offset: int
) -> None:
    """Sets the group's committed offset of `queue` on its broker."""
    check_group(group)
    entry = OffsetEntry(queue.topic, queue.queue_id, offset)
    body = UpdateConsumerOffsetRequest(consumer_group=group, entries=[entry])
    brokers.broker_request(brokers.queue_addr(queue), body, OkReply)


def reset_offset_by_time(
    brokers: BrokerLocator,
    group: str,
    topic: str,
    timestamp_ms: int,
    progress: Progress | None = None,
    queues: list[MessageQueue] | None = None,
) -> dict[MessageQueue, int]:
    """Finds, per queue of `topic` (or of `queues`), the first offset stored at or after
    timestamp_ms, then sets them as the group's offsets on each broker, which tells the
    group's live members to go on from there (RocketMQ's resetOffsetByTime)."""
    check_group(group)
    queues = brokers.queues(topic) if queues is None else queues
    found: dict[MessageQueue, int] = {}
    for i, queue in enumerate(queues, 1):
        found[queue] = search_offset(brokers, queue, timestamp_ms)
        if progress is not None:
            progress(i, len(queues))
    reset_offsets(brokers, group, topic, found, timestamp_ms)
    return found


def reset_offsets(
    brokers: BrokerLocator,
    group: str,
    topic: str,
    offsets: dict[MessageQueue, int],
    timestamp_ms: int = 0,
) -> None:
    """Sets the group's offsets of queues of `topic` on their brokers, which tell the group's
    live members. An offset past its queue's max offset is refused (it would skip messages
    stored later), as is one below zero."""
    check_group(group)
    for queue, offset in offsets.items():
        if queue.topic != topic:
            raise InvalidParameterError(f"queue {queue} is not a queue of {topic}")
        top = max_offset(brokers, queue)
        if not 0 <= offset <= top:
            raise InvalidParameterError(
                f"offset {offset} is outside 0..{top}, the offsets of queue {queue}"
            )
    by_broker: dict[str, list[OffsetEntry]] = {}
    for queue, offset in offsets.items():
        by_broker.setdefault(queue.broker_name, []).append(
            OffsetEntry(topic, queue.queue_id, offset)
        )
    for name, entries in sorted(by_broker.items()):
        addr = brokers.queue_addr(MessageQueue(topic, name, 0))
        body = ResetOffsetRequest(group, topic, entries, timestamp_ms)
        brokers.broker_request(addr, body, ResetOffsetReply)


def topic_queues(
    brokers: BrokerLocator, topic: str, cluster: str | None = None
) -> list[MessageQueue]:
    """The topic's read queues (of the brokers of `cluster` only, when given)."""
    check_topic(topic)
    queues = brokers.queues(topic)
    if cluster is None:
        return queues
    route = brokers.topic_route(topic)
    names = {b.broker_name for b in route.broker_datas if b.cluster == cluster}
    kept = [q for q in queues if q.broker_name in names]
    if not kept:
        raise BrokerNotExistError(f"no broker of cluster {cluster} serves {topic}")
    return kept


def skip_accumulated(
    brokers: BrokerLocator, group: str, topic: str, cluster: str | None = None
) -> dict[MessageQueue, int]:
    """Moves the group's offsets of the topic's queues to their max offsets: what was stored
    before is skipped; live members are told and go on from there."""
    offsets = {q: max_offset(brokers, q) for q in topic_queues(brokers, topic, cluster)}
    reset_offsets(brokers, group, topic, offsets)
    return offsets


def clone_group_offset(
    brokers: BrokerLocator, src: str, dest: str, topic: str, progress: Progress | None = None
) -> dict[MessageQueue, int]:
    """Copies `src`'s committed offsets of the topic's queues to `dest` (queues where `src`
    never committed are left alone); returns what was copied."""
    check_group(src)
    check_group(dest)
    if src == dest:
        raise InvalidParameterError("source and destination groups are the same")
    queues = topic_queues(brokers, topic)
    found: dict[MessageQueue, int] = {}
    for i, queue in enumerate(queues, 1):
        offset = consumer_offset(brokers, src, queue)
        if offset is not None:
            found[queue] = offset
        if progress is not None:
            progress(i, 2 * len(queues))
    if not found:
        raise SubscriptionGroupNotExistError(f"group {src} has no committed offset on {topic}")
    for i, (queue, offset) in enumerate(sorted(found.items()), 1):
        update_consumer_offset(brokers, dest, queue, offset)
        if progress is not None:
            progress(len(queues) + i * len(queues) // len(found), 2 * len(queues))
    return found
