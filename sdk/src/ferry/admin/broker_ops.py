"""mqadmin's broker commands: runtime figures (brokerStatus, statsAll), config
(getBrokerConfig, updateBrokerConfig), write permission on the name servers (wipeWritePerm,
addWritePerm), the scheduler and epoch, cleanExpiredCQ; and queryCq and haStatus (brokers
relay them to their store and ha-replicator)."""

from __future__ import annotations

from ferry.admin.locator import BrokerLocator
from ferry.protocol.errors import BrokerNotExistError, InvalidParameterError
from ferry.protocol.messages import (
    AddWritePermRequest,
    AnyRequest,
    BrokerConfigReply,
    BrokerEpochReply,
    BrokerRuntimeInfoReply,
    BrokerStatsReply,
    CleanExpiredConsumeQueueRequest,
    ConsumeQueueReply,
    GetBrokerConfigRequest,
    GetBrokerEpochRequest,
    GetBrokerHaStatusRequest,
    GetBrokerRuntimeInfoRequest,
    GetBrokerStatsRequest,
    HaStatusReply,
    OkReply,
    QueryConsumeQueueRequest,
    QueuesCleanedReply,
    SchedulerStatusReply,
    SchedulerStatusRequest,
    UpdateBrokerConfigRequest,
    WipeWritePermRequest,
    WritePermReply,
)
from ferry.protocol.names import check_topic


def broker_runtime_info(brokers: BrokerLocator, addr: str) -> dict[str, str]:
    reply = brokers.broker_request(addr, GetBrokerRuntimeInfoRequest(), BrokerRuntimeInfoReply)
    return dict(reply.info)


def broker_stats(brokers: BrokerLocator, addr: str) -> BrokerStatsReply:
    return brokers.broker_request(addr, GetBrokerStatsRequest(), BrokerStatsReply)


def scheduler_status(brokers: BrokerLocator, addr: str) -> SchedulerStatusReply:
    """The broker's scheduler: each delay level's progress, the timers pending."""
    return brokers.broker_request(addr, SchedulerStatusRequest(), SchedulerStatusReply)


def broker_epoch(brokers: BrokerLocator, addr: str) -> BrokerEpochReply:
    """getBrokerEpoch: a broker's epoch file (controller mode), as its log holds it."""
    return brokers.broker_request(addr, GetBrokerEpochRequest(), BrokerEpochReply)


# ---- config and write permission ----


def broker_config(brokers: BrokerLocator, addr: str) -> BrokerConfigReply:
    return brokers.broker_request(addr, GetBrokerConfigRequest(), BrokerConfigReply)


def update_broker_config(
    brokers: BrokerLocator,
    properties: dict[str, str],
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
    include_slaves: bool = False,
) -> list[str]:
    """Changes keys live and keeps them over restarts, on one broker, the masters of
    `cluster` (or of every cluster), with their slaves when include_slaves."""
    if include_slaves and not broker_addr:
        addrs = brokers.replica_addrs(cluster)
    else:
        addrs = brokers.targets(cluster, broker_addr)
    for addr in addrs:
        brokers.broker_request(addr, UpdateBrokerConfigRequest(properties=properties), OkReply)
    return addrs


def set_write_perm(brokers: BrokerLocator, broker_name: str, writable: bool) -> dict[str, int]:
    """wipeWritePerm / addWritePerm on every name server: name server -> topics changed."""
    if not broker_name.strip():
        raise InvalidParameterError("no broker name given")
    body: AnyRequest = (
        AddWritePermRequest(broker_name) if writable else WipeWritePermRequest(broker_name)
    )
    replies = brokers.each_namesrv(body, WritePermReply)
    return {addr: r.topics for addr, r in replies.items()}


# ---- the store and HA ----


def clean_expired_cq(
    brokers: BrokerLocator, *, cluster: str | None = None, broker_addr: str | None = None
) -> dict[str, QueuesCleanedReply]:
    body = CleanExpiredConsumeQueueRequest()
    return brokers.each_target(body, QueuesCleanedReply, cluster, broker_addr)


def query_cq(
    brokers: BrokerLocator,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    broker: str | None = None,
) -> tuple[str, ConsumeQueueReply]:
    """The ConsumeQueue entries of one queue of `topic` on its broker (-b: a name or an
    address; needed only when several brokers serve the topic): (broker address, reply)."""
    check_topic(topic)
    masters = brokers.master_addrs()
    served = sorted({q.broker_name for q in brokers.topic_route(topic).queue_datas})
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
    return addr, brokers.broker_request(addr, body, ConsumeQueueReply)


def ha_status(
    brokers: BrokerLocator, cluster: str | None = None, broker_addr: str | None = None
) -> dict[str, HaStatusReply]:
    """Each broker's HA replication, as its ha-replicator sees it."""
    return brokers.each_target(GetBrokerHaStatusRequest(), HaStatusReply, cluster, broker_addr)
