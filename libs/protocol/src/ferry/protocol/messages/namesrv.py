"""The name server's requests: brokers register their topics, clients ask for routes."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import Perm, RequestCode
from ferry.protocol.messages.common import Reply, Request, TopicConfig

# ---- routes ---------------------------------------------------------------------------------


class QueueData(msgspec.Struct, frozen=True, omit_defaults=True):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = Perm.READ_WRITE


class BrokerData(msgspec.Struct, frozen=True, omit_defaults=True):
    cluster: str
    broker_name: str
    # broker id (0 master, >0 slaves) -> "host:port" of its remoting endpoint
    broker_addrs: dict[int, str]
    # broker id -> "host:port" where it serves RocketMQ's remoting protocol (its door), for
    # the routes handed to RocketMQ clients; brokers without a door are absent
    rocketmq_addrs: dict[int, str] = {}


class TopicRouteData(msgspec.Struct, frozen=True, omit_defaults=True):
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    # the name server's ORDER_TOPIC_CONFIG kv entry for the topic (updateOrderConf), e.g.
    # "broker-a:4;broker-b:4"; "" when none
    order_topic_conf: str = ""


# ---- name server ----------------------------------------------------------------------------


class RegisterBrokerRequest(Request, frozen=True, tag="register_broker"):
    code = RequestCode.REGISTER_BROKER
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str = ""
    # where the broker serves RocketMQ's remoting protocol ("" when it does not)
    rocketmq_addr: str = ""
    topics: dict[str, TopicConfig] = {}
    # how long the name server keeps this broker without a new registration
    timeout_ms: int = 120_000
    # controller mode: the epoch the broker speaks for; a master of an older epoch than the
    # one a name server holds is refused (0 without controller mode)
    epoch: int = 0


class RegisterBrokerReply(Reply, frozen=True, tag="register_broker_reply"):
    master_addr: str = ""
    ha_addr: str = ""


class UnregisterBrokerRequest(Request, frozen=True, tag="unregister_broker"):
    code = RequestCode.UNREGISTER_BROKER
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    epoch: int = 0  # an older epoch's master never removes a newer one's entry


class GetRouteInfoRequest(Request, frozen=True, tag="get_route"):
    code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    topic: str


class RouteInfoReply(Reply, frozen=True, tag="route"):
    route: TopicRouteData


class GetClusterInfoRequest(Request, frozen=True, tag="get_cluster_info"):
    code = RequestCode.GET_BROKER_CLUSTER_INFO


class ClusterInfoReply(Reply, frozen=True, tag="cluster_info"):
    # broker name -> its data; cluster name -> broker names
    brokers: dict[str, BrokerData]
    clusters: dict[str, list[str]]


class GetAllTopicListRequest(Request, frozen=True, tag="get_topic_list"):
    code = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER


class TopicListReply(Reply, frozen=True, tag="topic_list"):
    topics: list[str]


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
NamesrvRequest: TypeAlias = (
    RegisterBrokerRequest
    | UnregisterBrokerRequest
    | GetRouteInfoRequest
    | GetClusterInfoRequest
    | GetAllTopicListRequest
)

NamesrvReply: TypeAlias = RegisterBrokerReply | RouteInfoReply | ClusterInfoReply | TopicListReply
