"""mqadmin's commands built from requests the brokers already serve: getConsumerConfig,
brokerConsumeStats, allocateMQ, skipAccumulatedMessage, cloneGroupOffset, updateTopicList,
cleanUnusedTopic; and queryCq, haStatus (brokers relay them to their store, ha-replicator)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from ferry.client.admin_ops import Progress, broker_request, sub_groups, targets
from ferry.client.allocate import averagely
from ferry.client.consume_progress import QueueProgress, queue_progress
from ferry.client.message import MessageQueue
from ferry.protocol.errors import (
    BrokerNotExistError,
    InvalidParameterError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    ClientConnection,
    ConsumeQueueReply,
    GetBrokerHaStatusRequest,
    GetProducerConnectionListRequest,
    GroupListReply,
    HaStatusReply,
    ProducerConnectionReply,
    QueryConsumeQueueRequest,
    QueryTopicConsumeByWhoRequest,
    SubscriptionGroupConfig,
)
from ferry.protocol.names import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    check_group,
    check_topic,
    is_system_topic,
)

if TYPE_CHECKING:
    from ferry.client.admin import Admin


LISTING_GROUP = "TOOLS_PRODUCER"  # any name: the broker's answer lists every group


@dataclass(frozen=True, slots=True)
class GroupConfigAt:
    cluster: str
    broker_name: str
    addr: str
    config: SubscriptionGroupConfig


def consumer_config(admin: Admin, group: str) -> list[GroupConfigAt]:
    """The group's subscription group config on every broker master that has it."""
    check_group(group)
    info = admin.cluster_info()
    cluster_of = {n: c for c, names in info.clusters.items() for n in names}
    out = []
    for name, addr in sorted(admin.master_addrs().items()):
        config = next((g for g in sub_groups(admin, addr) if g.group_name == group), None)
        if config is not None:
            out.append(GroupConfigAt(cluster_of.get(name, ""), name, addr, config))
    if not out:
        raise SubscriptionGroupNotExistError(f"no broker has subscription group {group}")
    return out


@dataclass(frozen=True, slots=True)
class GroupQueueStat:
    topic: str
    group: str
    progress: QueueProgress


def broker_name_of(admin: Admin, addr: str) -> str:
    for data in admin.cluster_info().brokers.values():
        if addr in data.broker_addrs.values():
            return data.broker_name
    raise BrokerNotExistError(f"no broker at {addr} is registered with the name servers")


def broker_consume_stats(admin: Admin, addr: str) -> list[GroupQueueStat]:
    """Every group consuming a topic of the broker at `addr`, per queue of that broker:
    broker offset, the group's committed offset, and the lag (RocketMQ's
    GET_BROKER_CONSUME_STATS, asked of the brokers one request at a time)."""
    name = broker_name_of(admin, addr)
    topics = sorted(
        c.topic_name for c in admin.topic_configs(addr) if not is_system_topic(c.topic_name)
    )
    out: list[GroupQueueStat] = []
    for topic in topics:
        body = QueryTopicConsumeByWhoRequest(topic=topic)
        groups = broker_request(admin, addr, body, GroupListReply).groups
        for group in sorted(groups):
            out.extend(
                GroupQueueStat(topic, group, p)
                for p in queue_progress(admin, group, topic)
                if p.queue.broker_name == name
            )
    return out


def allocate_mq(
    queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    """What the average strategy gives each client id (RocketMQ's allocateMQ): every member
    sorts the same ids and queues, so this is what a group of these members would do."""
    ids = sorted({i.strip() for i in client_ids if i.strip()})
    if not ids:
        raise InvalidParameterError("no client id given")
    ordered = sorted(set(queues))
    return {cid: averagely(i, len(ids), ordered) for i, cid in enumerate(ids)}


def topic_queues(admin: Admin, topic: str, cluster: str | None = None) -> list[MessageQueue]:
    """The topic's read queues (of the brokers of `cluster` only, when given)."""
    check_topic(topic)
    queues = admin.queues(topic)
    if cluster is None:
        return queues
    names = {b.broker_name for b in admin.topic_route(topic).broker_datas if b.cluster == cluster}
    kept = [q for q in queues if q.broker_name in names]
    if not kept:
        raise BrokerNotExistError(f"no broker of cluster {cluster} serves {topic}")
    return kept


def skip_accumulated(
    admin: Admin, group: str, topic: str, cluster: str | None = None
) -> dict[MessageQueue, int]:
    """Moves the group's offsets of the topic's queues to their max offsets: what was stored
    before is skipped; live members are told and go on from there."""
    offsets = {q: admin.max_offset(q) for q in topic_queues(admin, topic, cluster)}
    admin.reset_offsets(group, topic, offsets)
    return offsets


def clone_group_offset(
    admin: Admin, src: str, dest: str, topic: str, progress: Progress | None = None
) -> dict[MessageQueue, int]:
    """Copies `src`'s committed offsets of the topic's queues to `dest` (queues where `src`
    never committed are left alone); returns what was copied."""
    check_group(src)
    check_group(dest)
    if src == dest:
        raise InvalidParameterError("source and destination groups are the same")
    queues = topic_queues(admin, topic)
    found: dict[MessageQueue, int] = {}
    for i, queue in enumerate(queues, 1):
        offset = admin.consumer_offset(src, queue)
        if offset is not None:
            found[queue] = offset
        if progress is not None:
            progress(i, 2 * len(queues))
    if not found:
        raise SubscriptionGroupNotExistError(f"group {src} has no committed offset on {topic}")
    for i, (queue, offset) in enumerate(sorted(found.items()), 1):
        admin.update_consumer_offset(dest, queue, offset)
        if progress is not None:
            progress(len(queues) + i * len(queues) // len(found), 2 * len(queues))
    return found


# ---- topics (updateTopicList, cleanUnusedTopic) ----


class TopicSpec(msgspec.Struct, rename="camel", forbid_unknown_fields=False):
    """One topic of an updateTopicList file (RocketMQ's TopicConfig JSON)."""

    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6


def read_topic_list(data: bytes) -> list[TopicSpec]:
    """A JSON list of topics, as RocketMQ's updateTopicList reads; every name checked first."""
    try:
        specs = msgspec.json.decode(data, type=list[TopicSpec])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidParameterError(
            f'not a JSON list of topics ([{{"topicName": ..., "readQueueNums": 8, ...}}]): {exc}'
        ) from None
    if not specs:
        raise InvalidParameterError("the topic list is empty")
    for spec in specs:
        check_topic(spec.topic_name)
    return specs


def unused_topics(admin: Admin) -> list[str]:
    """Topics that never stored a message (every queue's max offset 0) and that no group
    consumes: what cleanUnusedTopic deletes. System, retry and DLQ topics are never unused."""
    out = []
    for topic in sorted(admin.topic_list()):
        if is_system_topic(topic) or topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        try:
            stats = admin.topic_stats(topic)
            if any(q.max_offset > 0 for queues in stats.values() for q in queues):
                continue
            if admin.consumer_groups(topic):
                continue
        except TopicNotExistError:
            continue  # deleted meanwhile
        out.append(topic)
    return out


# ---- the store and HA (queryCq, haStatus) ----


def query_cq(
    admin: Admin, topic: str, queue_id: int, index: int, count: int, broker: str | None = None
) -> tuple[str, ConsumeQueueReply]:
    """The ConsumeQueue entries of one queue of `topic` on its broker (-b: a name or an
    address; needed only when several brokers serve the topic): (broker address, reply)."""
    check_topic(topic)
    masters = admin.master_addrs()
    served = sorted({q.broker_name for q in admin.topic_route(topic).queue_datas})
    if broker is None:
        if len(served) != 1:
            raise InvalidParameterError(
                f"{topic} is on brokers {', '.join(served)}: say which with -b"
            )
        broker = served[0]
    addr = masters.get(broker, broker)
    if addr not in masters.values():
        raise BrokerNotExistError(f"no broker master is named or at {broker}")
    body = QueryConsumeQueueRequest(topic, queue_id, index, count)
    return addr, broker_request(admin, addr, body, ConsumeQueueReply)


def ha_status(
    admin: Admin, cluster: str | None = None, broker_addr: str | None = None
) -> dict[str, HaStatusReply]:
    """Each broker's HA replication, as its ha-replicator sees it."""
    body = GetBrokerHaStatusRequest()
    return {
        a: broker_request(admin, a, body, HaStatusReply)
        for a in targets(admin, cluster, broker_addr)
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def read_sub_group_list(data: bytes) -> list[SubscriptionGroupConfig]:
    """A JSON list of subscription groups (RocketMQ's SubscriptionGroupConfig JSON, camelCase;
    keys Ferry does not keep are ignored); every name checked first."""
    names = {_camel(f.name): f.name for f in msgspec.structs.fields(SubscriptionGroupConfig)}
    try:
        raw = msgspec.json.decode(data, type=list[dict[str, object]])
        out = [
            msgspec.convert(
                {names[k]: v for k, v in entry.items() if k in names}, SubscriptionGroupConfig
            )
            for entry in raw
        ]
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidParameterError(
            f'not a JSON list of groups ([{{"groupName": ..., "retryMaxTimes": 16, ...}}]): {exc}'
        ) from None
    if not out:
        raise InvalidParameterError("the group list is empty")
    for config in out:
        check_group(config.group_name)
    return out


def all_producers(admin: Admin, addr: str) -> dict[str, list[ClientConnection]]:
    """Every producer group with a live producer on the broker at `addr`, and its producers
    (mqadmin producer). A broker's answer about any group lists every such group."""
    first = broker_request(
        admin, addr, GetProducerConnectionListRequest(LISTING_GROUP), ProducerConnectionReply
    )
    return {
        group: list(
            broker_request(
                admin, addr, GetProducerConnectionListRequest(group), ProducerConnectionReply
            ).connections
        )
        for group in sorted(first.groups)
    }
