"""How far consumer groups are behind (mqadmin consumerProgress): per queue of a topic, the
broker's max offset against the group's committed offset, and each group's total lag.

Lag is never negative: a committed offset past the max offset (a broker that lost its last
messages in a crash, or a commit older brokers took as it came) counts as caught up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.client.message import MessageQueue
from ferry.protocol.errors import FerryError, TopicNotExistError

if TYPE_CHECKING:
    from ferry.client.admin import Admin


def lag_of(broker_offset: int, consumer_offset: int | None) -> int | None:
    """Messages the group has still to consume from a queue; None when it never committed."""
    if consumer_offset is None:
        return None
    return max(0, broker_offset - consumer_offset)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int | None  # None: the group never committed on this queue

    @property
    def lag(self) -> int | None:
        return lag_of(self.broker_offset, self.consumer_offset)


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topics: tuple[str, ...]
    lag: int  # over every queue of its topics it committed on


def queue_progress(admin: Admin, group: str, topic: str) -> list[QueueProgress]:
    """Each read queue of `topic`: max offset (one request per broker) and the group's
    committed offset."""
    tops = {
        (broker, q.queue_id): q.max_offset
        for broker, stats in admin.topic_stats(topic).items()
        for q in stats
    }
    return [
        QueueProgress(q, tops.get((q.broker_name, q.queue_id), 0), admin.consumer_offset(group, q))
        for q in admin.queues(topic)
    ]


def groups_by_topic(admin: Admin, topic: str | None = None) -> dict[str, list[str]]:
    """group -> the topics it consumes (a live member subscribes, or it committed an
    offset), over every topic the name servers know (or `topic` alone). A topic no broker
    serves any more is passed over."""
    topics = [topic] if topic else sorted(admin.topic_list())
    out: dict[str, list[str]] = {}
    for name in topics:
        try:
            groups = admin.consumer_groups(name)
        except TopicNotExistError:
            if topic:
                raise
            continue
        for group in groups:
            out.setdefault(group, []).append(name)
    return out


def group_lags(admin: Admin, topic: str | None = None) -> list[GroupLag]:
    """Every group with its total lag (over `topic` alone when given), sorted by name."""
    out = []
    for group, topics in sorted(groups_by_topic(admin, topic).items()):
        lag = 0
        for name in topics:
            try:
                lag += sum(p.lag or 0 for p in queue_progress(admin, group, name))
            except FerryError:
                if topic:
                    raise
                continue  # deleted meanwhile
        out.append(GroupLag(group, tuple(topics), lag))
    return out
