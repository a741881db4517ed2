"""mqadmin operations of a started Admin beyond topics and routes: deleteTopic,
updateTopicPerm, subscription groups, broker config, write permission on the name servers,
client connections, resetOffsetByTime, statsAll and cleanExpiredCQ.

Every failure names the broker or name server that failed (`at`), so that an operator knows
where to look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import msgspec

from ferry.client.message import MessageQueue
from ferry.client.transport import expect
from ferry.protocol.errors import (
    BrokerNotExistError,
    FerryError,
    InvalidParameterError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    AddWritePermRequest,
    AnyRequest,
    BrokerConfigReply,
    BrokerStatsReply,
    CleanExpiredConsumeQueueRequest,
    ClusterInfoReply,
    ConsumerConnectionReply,
    DeleteSubscriptionGroupRequest,
    DeleteTopicInNamesrvRequest,
    DeleteTopicRequest,
    GetAllSubscriptionGroupRequest,
    GetBrokerConfigRequest,
    GetBrokerStatsRequest,
    GetConsumerConnectionListRequest,
    GetProducerConnectionListRequest,
    OffsetEntry,
    OkReply,
    ProducerConnectionReply,
    QueuesCleanedReply,
    Reply,
    ResetOffsetReply,
    ResetOffsetRequest,
    SubscriptionGroupConfig,
    SubscriptionGroupListReply,
    UpdateBrokerConfigRequest,
    UpdateSubscriptionGroupRequest,
    UpdateTopicRequest,
    WipeWritePermRequest,
    WritePermReply,
)
from ferry.protocol.names import check_group, check_topic

if TYPE_CHECKING:
    from ferry.client.admin import Admin

R = TypeVar("R", bound=Reply)
MASTER_ID = 0
Progress = Callable[[int, int], None]  # (done, total)


def at(err: FerryError, where: str) -> FerryError:
    """The same error, its message saying where it happened, and the address said once."""
    if err.message.startswith(where):
        return err
    address = where.rpartition(" ")[2]
    if err.message == f"connection refused: nothing answers at {address}":
        message = f"{where}: connection refused, nothing answers there (is it running?)"
        return type(err)(message, retriable=err.retriable, code=err.code)
    return type(err)(f"{where}: {err.message}", retriable=err.retriable, code=err.code)


def broker_request(admin: Admin, addr: str, body: AnyRequest, cls: type[R]) -> R:
    inst = admin._started()
    try:
        return expect(inst.connection(addr).request(body, timeout_s=inst.api_timeout_s), cls)
    except FerryError as err:
        raise at(err, f"broker {addr}") from None


def each_namesrv(admin: Admin, body: AnyRequest, cls: type[R]) -> dict[str, R]:
    """Sends to every name server (they are independent, as RocketMQ's)."""
    inst = admin._started()
    out: dict[str, R] = {}
    for addr in inst.routes.namesrv_addrs:
        try:
            result = inst.connection(addr).request(body, timeout_s=inst.api_timeout_s)
            out[addr] = expect(result, cls)
        except FerryError as err:
            raise at(err, f"name server {addr}") from None
    return out


def targets(admin: Admin, cluster: str | None, broker_addr: str | None) -> list[str]:
    """One broker (-b), or the masters of a cluster (-c), or of every cluster."""
    if broker_addr:
        return [broker_addr]
    addrs = sorted(set(admin.master_addrs(cluster).values()))
    if not addrs:
        raise BrokerNotExistError(f"no broker master in {cluster or 'any cluster'}")
    return addrs


def broker_names(info: ClusterInfoReply, cluster: str | None) -> list[str]:
    """The broker names of one cluster, or of all; an unknown cluster is refused."""
    if cluster is not None and cluster not in info.clusters:
        raise InvalidParameterError(f"cluster {cluster!r} is unknown to the name server")
    return list(info.clusters[cluster]) if cluster is not None else list(info.brokers)


def replica_addrs(admin: Admin, cluster: str | None) -> list[str]:
    """Every broker of a cluster (or of all), masters and slaves."""
    info = admin.cluster_info()
    names = broker_names(info, cluster)
    addrs = sorted(
        {a for n in names if (data := info.brokers.get(n)) for a in data.broker_addrs.values()}
    )
    if not addrs:
        raise BrokerNotExistError(f"no broker in {cluster or 'any cluster'}")
    return addrs


# ---- topics ----


def delete_topic(
    admin: Admin, topic: str, cluster: str | None = None
) -> dict[str, QueuesCleanedReply]:
    """Deletes `topic` on the masters serving it (of `cluster` only, when given), then on
    every name server. Each broker drops its config, offsets and ConsumeQueues."""
    check_topic(topic)
    route = admin.topic_route(topic)
    addrs = sorted(
        b.broker_addrs[MASTER_ID]
        for b in route.broker_datas
        if MASTER_ID in b.broker_addrs and (cluster is None or b.cluster == cluster)
    )
    if not addrs:
        raise TopicNotExistError(f"no master of {cluster or 'any cluster'} serves {topic}")
    done = {
        a: broker_request(admin, a, DeleteTopicRequest(topic), QueuesCleanedReply) for a in addrs
    }
    each_namesrv(admin, DeleteTopicInNamesrvRequest(topic, cluster or ""), OkReply)
    admin._started().routes.invalidate(topic)
    return done


def update_topic_perm(
    admin: Admin,
    topic: str,
    perm: int,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
) -> list[str]:
    """Changes the perm of `topic` where it exists; returns the brokers changed."""
    check_topic(topic)
    changed: list[str] = []
    for addr in targets(admin, cluster, broker_addr):
        config = next((c for c in admin.topic_configs(addr) if c.topic_name == topic), None)
        if config is None:
            continue
        body = UpdateTopicRequest(config=msgspec.structs.replace(config, perm=perm))
        broker_request(admin, addr, body, OkReply)
        changed.append(addr)
    if not changed:
        raise TopicNotExistError(
            f"topic {topic} is on none of {', '.join(targets(admin, cluster, broker_addr))}"
        )
    admin._started().routes.invalidate(topic)
    return changed


# ---- subscription groups ----


def sub_groups(admin: Admin, addr: str) -> list[SubscriptionGroupConfig]:
    reply = broker_request(
        admin, addr, GetAllSubscriptionGroupRequest(), SubscriptionGroupListReply
    )
    return list(reply.groups)


def update_sub_group(
    admin: Admin,
    config: SubscriptionGroupConfig,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
) -> list[str]:
    check_group(config.group_name)
    addrs = targets(admin, cluster, broker_addr)
    for addr in addrs:
        broker_request(admin, addr, UpdateSubscriptionGroupRequest(config=config), OkReply)
    return addrs


def delete_sub_group(
    admin: Admin,
    group: str,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
    clean_offset: bool = False,
) -> list[str]:
    check_group(group)
    addrs = targets(admin, cluster, broker_addr)
    body = DeleteSubscriptionGroupRequest(group_name=group, clean_offset=clean_offset)
    for addr in addrs:
        broker_request(admin, addr, body, OkReply)
    return addrs


# ---- broker config and write permission ----


def broker_config(admin: Admin, addr: str) -> BrokerConfigReply:
    return broker_request(admin, addr, GetBrokerConfigRequest(), BrokerConfigReply)


def update_broker_config(
    admin: Admin,
    properties: dict[str, str],
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
    include_slaves: bool = False,
) -> list[str]:
    if include_slaves and not broker_addr:
        addrs = replica_addrs(admin, cluster)
    else:
        addrs = targets(admin, cluster, broker_addr)
    for addr in addrs:
        broker_request(admin, addr, UpdateBrokerConfigRequest(properties=properties), OkReply)
    return addrs


def set_write_perm(admin: Admin, broker_name: str, writable: bool) -> dict[str, int]:
    """wipeWritePerm / addWritePerm on every name server: name server -> topics changed."""
    if not broker_name.strip():
        raise InvalidParameterError("no broker name given")
    body: AnyRequest = (
        AddWritePermRequest(broker_name) if writable else WipeWritePermRequest(broker_name)
    )
    replies = each_namesrv(admin, body, WritePermReply)
    return {addr: r.topics for addr, r in replies.items()}


# ---- clients ----


def consumer_connections(admin: Admin, group: str) -> dict[str, ConsumerConnectionReply]:
    """Per broker master, the group's live members it knows from their heartbeats."""
    check_group(group)
    body = GetConsumerConnectionListRequest(consumer_group=group)
    return {
        addr: broker_request(admin, addr, body, ConsumerConnectionReply)
        for addr in targets(admin, None, None)
    }


def producer_connections(
    admin: Admin, group: str, topic: str | None = None
) -> dict[str, ProducerConnectionReply]:
    """Per broker master (of `topic`'s brokers when given), the group's live producers."""
    check_group(group)
    if topic:
        route = admin.topic_route(topic)
        addrs = sorted(
            b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs
        )
    else:
        addrs = targets(admin, None, None)
    body = GetProducerConnectionListRequest(producer_group=group)
    return {addr: broker_request(admin, addr, body, ProducerConnectionReply) for addr in addrs}


def reset_offset_by_time(
    admin: Admin,
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
    queues = admin.queues(topic) if queues is None else queues
    found: dict[MessageQueue, int] = {}
    for i, queue in enumerate(queues, 1):
        found[queue] = admin.search_offset(queue, timestamp_ms)
        if progress is not None:
            progress(i, len(queues))
    reset_offsets(admin, group, topic, found, timestamp_ms)
    return found


def reset_offsets(
    admin: Admin, group: str, topic: str, offsets: dict[MessageQueue, int], timestamp_ms: int = 0
) -> None:
    """Sets the group's offsets of queues of `topic` on their brokers, which tell the group's
    live members. An offset past its queue's max offset is refused (it would skip messages
    stored later), as is one below zero."""
    check_group(group)
    for queue, offset in offsets.items():
        if queue.topic != topic:
            raise InvalidParameterError(f"queue {queue} is not a queue of {topic}")
        top = admin.max_offset(queue)
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
        addr = admin._queue_addr(MessageQueue(topic, name, 0))
        body = ResetOffsetRequest(group, topic, entries, timestamp_ms)
        broker_request(admin, addr, body, ResetOffsetReply)


# ---- traffic and the store ----


def broker_stats(admin: Admin, addr: str) -> BrokerStatsReply:
    return broker_request(admin, addr, GetBrokerStatsRequest(), BrokerStatsReply)


def clean_expired_cq(
    admin: Admin, *, cluster: str | None = None, broker_addr: str | None = None
) -> dict[str, QueuesCleanedReply]:
    body = CleanExpiredConsumeQueueRequest()
    return {
        addr: broker_request(admin, addr, body, QueuesCleanedReply)
        for addr in targets(admin, cluster, broker_addr)
    }


def all_groups(admin: Admin, addrs: Iterable[str]) -> list[str]:
    """Subscription group names over the given brokers (shell completion)."""
    names: set[str] = set()
    for addr in addrs:
        names.update(g.group_name for g in sub_groups(admin, addr))
    return sorted(names)
