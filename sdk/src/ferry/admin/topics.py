"""mqadmin's topic commands: updateTopic, topicStatus, deleteTopic, updateTopicPerm,
updateTopicList (read_topic_list) and cleanUnusedTopic (unused_topics)."""

from __future__ import annotations

import msgspec

from ferry.admin.groups import consumer_groups
from ferry.admin.locator import MASTER_ID, BrokerLocator
from ferry.client.transport import expect, wait
from ferry.protocol.codes import Perm
from ferry.protocol.errors import BrokerNotExistError, InvalidParameterError, TopicNotExistError
from ferry.protocol.messages import (
    DeleteTopicInNamesrvRequest,
    DeleteTopicRequest,
    GetAllTopicConfigRequest,
    GetTopicStatsRequest,
    OkReply,
    QueuesCleanedReply,
    QueueStat,
    TopicConfig,
    TopicConfigListReply,
    TopicStatsReply,
    UpdateTopicRequest,
)
from ferry.protocol.names import DLQ_PREFIX, RETRY_PREFIX, check_topic, is_system_topic


def create_topic(
    brokers: BrokerLocator,
    topic: str,
    read_queue_nums: int = 8,
    write_queue_nums: int = 8,
    perm: int = Perm.READ_WRITE,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
) -> list[str]:
    """Creates or updates `topic` on one broker (broker_addr) or on the master of every
    broker of `cluster` (every cluster when neither is given), all at once; returns the
    addresses updated."""
    check_topic(topic)
    if read_queue_nums <= 0 or write_queue_nums <= 0:
        raise InvalidParameterError("queue numbers must be positive")
    if perm & ~(Perm.READ_WRITE | Perm.INHERIT):
        raise InvalidParameterError(f"perm {perm} is not a combination of 2 (W) and 4 (R)")
    config = TopicConfig(
        topic_name=topic,
        read_queue_nums=read_queue_nums,
        write_queue_nums=write_queue_nums,
        perm=perm,
    )
    addrs = [broker_addr] if broker_addr else sorted(set(brokers.master_addrs(cluster).values()))
    if not addrs:
        raise BrokerNotExistError(f"no broker master in {cluster or 'any cluster'}")
    inst = brokers.instance()
    body = UpdateTopicRequest(config=config)
    futures = [(a, inst.connection(a).submit(body, timeout_s=inst.api_timeout_s)) for a in addrs]
    for addr, future in futures:
        expect(wait(future, inst.api_timeout_s, addr), OkReply)
    brokers.invalidate(topic)
    return addrs


def topic_configs(brokers: BrokerLocator, broker_addr: str) -> list[TopicConfig]:
    reply = brokers.broker_request(broker_addr, GetAllTopicConfigRequest(), TopicConfigListReply)
    return list(reply.topics)


def topic_stats(brokers: BrokerLocator, topic: str) -> dict[str, list[QueueStat]]:
    """broker name -> min/max offset of each queue of `topic` on it."""
    route = brokers.topic_route(topic)
    out: dict[str, list[QueueStat]] = {}
    for data in sorted(route.broker_datas, key=lambda b: b.broker_name):
        addr = data.broker_addrs.get(MASTER_ID) or next(iter(data.broker_addrs.values()), "")
        if not addr:
            continue
        reply = brokers.broker_request(addr, GetTopicStatsRequest(topic=topic), TopicStatsReply)
        out[data.broker_name] = sorted(reply.queues, key=lambda q: q.queue_id)
    return out


def delete_topic(
    brokers: BrokerLocator, topic: str, cluster: str | None = None
) -> dict[str, QueuesCleanedReply]:
    """Deletes `topic` on the masters serving it (of `cluster` only, when given), then on
    every name server. Each broker drops its config, offsets and ConsumeQueues."""
    check_topic(topic)
    route = brokers.topic_route(topic)
    addrs = sorted(
        b.broker_addrs[MASTER_ID]
        for b in route.broker_datas
        if MASTER_ID in b.broker_addrs and (cluster is None or b.cluster == cluster)
    )
    if not addrs:
        raise TopicNotExistError(f"no master of {cluster or 'any cluster'} serves {topic}")
    done = {
        a: brokers.broker_request(a, DeleteTopicRequest(topic), QueuesCleanedReply) for a in addrs
    }
    brokers.each_namesrv(DeleteTopicInNamesrvRequest(topic, cluster or ""), OkReply)
    brokers.invalidate(topic)
    return done


def update_topic_perm(
    brokers: BrokerLocator,
    topic: str,
    perm: int,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
) -> list[str]:
    """Changes the perm of `topic` where it exists; returns the brokers changed."""
    check_topic(topic)
    changed: list[str] = []
    for addr in brokers.targets(cluster, broker_addr):
        config = next((c for c in topic_configs(brokers, addr) if c.topic_name == topic), None)
        if config is None:
            continue
        body = UpdateTopicRequest(config=msgspec.structs.replace(config, perm=perm))
        brokers.broker_request(addr, body, OkReply)
        changed.append(addr)
    if not changed:
        raise TopicNotExistError(
            f"topic {topic} is on none of {', '.join(brokers.targets(cluster, broker_addr))}"
        )
    brokers.invalidate(topic)
    return changed


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


def unused_topics(brokers: BrokerLocator) -> list[str]:
    """Topics that never stored a message (every queue's max offset 0) and that no group
    consumes: what cleanUnusedTopic deletes. System, retry and DLQ topics are never unused."""
    out = []
    for topic in sorted(brokers.topic_list()):
        if is_system_topic(topic) or topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        try:
            stats = topic_stats(brokers, topic)
            if any(q.max_offset > 0 for queues in stats.values() for q in queues):
                continue
            if consumer_groups(brokers, topic):
                continue
        except TopicNotExistError:
            continue  # deleted meanwhile
        out.append(topic)
    return out
