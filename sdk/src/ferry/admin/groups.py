"""mqadmin's group commands: who consumes a topic (queryTopicConsumeByWho), subscription
groups (updateSubGroup, deleteSubGroup, getConsumerConfig, updateSubGroupList), live members
(consumerConnection, producerConnection, producer) and allocateMQ."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from ferry.admin.locator import MASTER_ID, BrokerLocator
from ferry.client.allocate import averagely
from ferry.client.message import MessageQueue
from ferry.protocol.errors import InvalidParameterError, SubscriptionGroupNotExistError
from ferry.protocol.messages import (
    ClientConnection,
    ConsumerConnectionReply,
    ConsumerListReply,
    DeleteSubscriptionGroupRequest,
    GetAllSubscriptionGroupRequest,
    GetConsumerConnectionListRequest,
    GetConsumerListByGroupRequest,
    GetProducerConnectionListRequest,
    GroupListReply,
    OkReply,
    ProducerConnectionReply,
    QueryTopicConsumeByWhoRequest,
    SubscriptionGroupConfig,
    SubscriptionGroupListReply,
    UpdateSubscriptionGroupRequest,
)
from ferry.protocol.names import check_group

LISTING_GROUP = "TOOLS_PRODUCER"  # any name: the broker's answer lists every group


# ---- who consumes ----


def consumer_groups(brokers: BrokerLocator, topic: str) -> list[str]:
    """Groups consuming `topic` (a live member subscribed, or an offset committed), over
    every broker serving it (mqadmin's queryTopicConsumeByWho)."""
    route = brokers.topic_route(topic)
    groups: set[str] = set()
    for data in route.broker_datas:
        addr = data.broker_addrs.get(MASTER_ID) or next(iter(data.broker_addrs.values()), "")
        if addr:
            body = QueryTopicConsumeByWhoRequest(topic=topic)
            groups.update(brokers.broker_request(addr, body, GroupListReply).groups)
    return sorted(groups)


def consumer_ids(brokers: BrokerLocator, group: str, broker_addr: str) -> list[str]:
    """The live members of `group` a broker knows from their heartbeats, sorted."""
    check_group(group)
    body = GetConsumerListByGroupRequest(consumer_group=group)
    return sorted(brokers.broker_request(broker_addr, body, ConsumerListReply).client_ids)


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


# ---- subscription groups ----


def sub_groups(brokers: BrokerLocator, addr: str) -> list[SubscriptionGroupConfig]:
    body = GetAllSubscriptionGroupRequest()
    return list(brokers.broker_request(addr, body, SubscriptionGroupListReply).groups)


def all_groups(brokers: BrokerLocator, addrs: Iterable[str]) -> list[str]:
    """Subscription group names over the given brokers (shell completion)."""
    names: set[str] = set()
    for addr in addrs:
        names.update(g.group_name for g in sub_groups(brokers, addr))
    return sorted(names)


def update_sub_group(
    brokers: BrokerLocator,
    config: SubscriptionGroupConfig,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
) -> list[str]:
    check_group(config.group_name)
    body = UpdateSubscriptionGroupRequest(config=config)
    return list(brokers.each_target(body, OkReply, cluster, broker_addr))


def delete_sub_group(
    brokers: BrokerLocator,
    group: str,
    *,
    cluster: str | None = None,
    broker_addr: str | None = None,
    clean_offset: bool = False,
) -> list[str]:
    check_group(group)
    body = DeleteSubscriptionGroupRequest(group_name=group, clean_offset=clean_offset)
    return list(brokers.each_target(body, OkReply, cluster, broker_addr))


@dataclass(frozen=True, slots=True)
class GroupConfigAt:
    cluster: str
    broker_name: str
    addr: str
    config: SubscriptionGroupConfig


def consumer_config(brokers: BrokerLocator, group: str) -> list[GroupConfigAt]:
    """The group's subscription group config on every broker master that has it."""
    check_group(group)
    info = brokers.cluster_info()
    cluster_of = {n: c for c, names in info.clusters.items() for n in names}
    out = []
    for name, addr in sorted(brokers.master_addrs().items()):
        config = next((g for g in sub_groups(brokers, addr) if g.group_name == group), None)
        if config is not None:
            out.append(GroupConfigAt(cluster_of.get(name, ""), name, addr, config))
    if not out:
        raise SubscriptionGroupNotExistError(f"no broker has subscription group {group}")
    return out


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


# ---- live clients ----


def consumer_connections(brokers: BrokerLocator, group: str) -> dict[str, ConsumerConnectionReply]:
    """Per broker master, the group's live members it knows from their heartbeats."""
    check_group(group)
    body = GetConsumerConnectionListRequest(consumer_group=group)
    return brokers.each_target(body, ConsumerConnectionReply, None, None)


def producer_connections(
    brokers: BrokerLocator, group: str, topic: str | None = None
) -> dict[str, ProducerConnectionReply]:
    """Per broker master (of `topic`'s brokers when given), the group's live producers."""
    check_group(group)
    if topic:
        route = brokers.topic_route(topic)
        addrs = sorted(
            b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs
        )
    else:
        addrs = brokers.targets(None, None)
    body = GetProducerConnectionListRequest(producer_group=group)
    return {a: brokers.broker_request(a, body, ProducerConnectionReply) for a in addrs}


def all_producers(brokers: BrokerLocator, addr: str) -> dict[str, list[ClientConnection]]:
    """Every producer group with a live producer on the broker at `addr`, and its producers
    (mqadmin producer). A broker's answer about any group lists every such group."""
    listing = GetProducerConnectionListRequest(LISTING_GROUP)
    first = brokers.broker_request(addr, listing, ProducerConnectionReply)
    return {
        group: list(
            brokers.broker_request(
                addr, GetProducerConnectionListRequest(group), ProducerConnectionReply
            ).connections
        )
        for group in sorted(first.groups)
    }
