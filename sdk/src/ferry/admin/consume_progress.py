"""How far consumer groups are behind (mqadmin consumerProgress, brokerConsumeStats): per
queue of a topic, the broker's max offset against the group's committed offset, and each
group's total lag.

Lag is never negative: a committed offset past the max offset (a broker that lost its last
messages in a crash, or a commit older brokers took as it came) counts as caught up.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.admin.groups import consumer_groups
from ferry.admin.locator import BrokerLocator
from ferry.admin.offsets import consumer_offset
from ferry.admin.topics import topic_configs, topic_stats
from ferry.client.message import MessageQueue
from ferry.protocol.errors import BrokerNotExistError, FerryError, TopicNotExistError
from ferry.protocol.messages import GroupListReply, QueryTopicConsumeByWhoRequest
from ferry.protocol.names import is_system_topic


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


def queue_progress(brokers: BrokerLocator, group: str, topic: str) -> list[QueueProgress]:
    """Each read queue of `topic`: max offset (one request per broker) and the group's
    committed offset."""
    tops = {
        (broker, q.queue_id): q.max_offset
        for broker, stats in topic_stats(brokers, topic).items()
        for q in stats
    }
    return [
        QueueProgress(
            q, tops.get((q.broker_name, q.queue_id), 0), consumer_offset(brokers, group, q)
        )
        for q in brokers.queues(topic)
    ]


def groups_by_topic(brokers: BrokerLocator, topic: str | None = None) -> dict[str, list[str]]:
    """group -> the topics it consumes (a live member subscribes, or it committed an
    offset), over every topic the name servers know (or `topic` alone). A topic no broker
    serves any more is passed over."""
    topics = [topic] if topic else sorted(brokers.topic_list())
    out: dict[str, list[str]] = {}
    for name in topics:
        try:
            groups = consumer_groups(brokers, name)
        except TopicNotExistError:
            if topic:
                raise
            continue
        for group in groups:
            out.setdefault(group, []).append(name)
    return out


def group_lags(brokers: BrokerLocator, topic: str | None = None) -> list[GroupLag]:
    """Every group with its total lag (over `topic` alone when given), sorted by name."""
    out = []
    for group, topics in sorted(groups_by_topic(brokers, topic).items()):
        lag = 0
        for name in topics:
            try:
                lag += sum(p.lag or 0 for p in queue_progress(brokers, group, name))
            except FerryError:
                if topic:
                    raise
                continue  # deleted meanwhile
        out.append(GroupLag(group, tuple(topics), lag))
    return out


@dataclass(frozen=True, slots=True)
class GroupQueueStat:
    topic: str
    group: str
    progress: QueueProgress


def broker_name_of(brokers: BrokerLocator, addr: str) -> str:
    for data in brokers.cluster_info().brokers.values():
        if addr in data.broker_addrs.values():
            return data.broker_name
    raise BrokerNotExistError(f"no broker at {addr} is registered with the name servers")


def broker_consume_stats(brokers: BrokerLocator, addr: str) -> list[GroupQueueStat]:
    """Every group consuming a topic of the broker at `addr`, per queue of that broker:
    broker offset, the group's committed offset, and the lag (RocketMQ's
    GET_BROKER_CONSUME_STATS, asked of the brokers one request at a time)."""
    name = broker_name_of(brokers, addr)
    topics = sorted(
        c.topic_name for c in topic_configs(brokers, addr) if not is_system_topic(c.topic_name)
    )
    out: list[GroupQueueStat] = []
    for topic in topics:
        body = QueryTopicConsumeByWhoRequest(topic=topic)
        groups = brokers.broker_request(addr, body, GroupListReply).groups
        for group in sorted(groups):
            out.extend(
                GroupQueueStat(topic, group, p)
                for p in queue_progress(brokers, group, topic)
                if p.queue.broker_name == name
            )
    return out
