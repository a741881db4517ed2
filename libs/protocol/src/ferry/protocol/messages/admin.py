"""Administration (mqadmin and the console): groups, topics, broker config, connections, stats."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import OffsetEntry, Reply, Request, SubscriptionData

# ---- administration (mqadmin) ---------------------------------------------------------------


class SubscriptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A consumer group's settings on a broker (RocketMQ's SubscriptionGroupConfig)."""

    group_name: str
    consume_enable: bool = True  # False: pulls are refused (NO_PERMISSION)
    consume_broadcast_enable: bool = True
    consume_from_min_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16  # failed deliveries before %DLQ%group
    notify_consumer_ids_changed_enable: bool = True
    # a FIFO group (RocketMQ 5's consumeMessageOrderly): its pops are orderly (pop_order.py)
    consume_message_orderly: bool = False


class UpdateSubscriptionGroupRequest(Request, frozen=True, tag="update_subscription_group"):
    code = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
    config: SubscriptionGroupConfig


class GetAllSubscriptionGroupRequest(Request, frozen=True, tag="get_all_subscription_group"):
    code = RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG


class SubscriptionGroupListReply(Reply, frozen=True, tag="subscription_groups"):
    groups: list[SubscriptionGroupConfig]


class DeleteSubscriptionGroupRequest(Request, frozen=True, tag="delete_subscription_group"):
    """Drops a group's config; with clean_offset also its committed offsets."""

    code = RequestCode.DELETE_SUBSCRIPTIONGROUP
    group_name: str
    clean_offset: bool = False


class DeleteTopicRequest(Request, frozen=True, tag="delete_topic_in_broker"):
    """Drops a topic's config, its committed offsets and (through the store) its
    ConsumeQueues; its records stay in the CommitLog until retention deletes them."""

    code = RequestCode.DELETE_TOPIC_IN_BROKER
    topic: str


class DeleteTopicInNamesrvRequest(Request, frozen=True, tag="delete_topic_in_namesrv"):
    """Drops a topic's route (of the brokers of `cluster` only, when given)."""

    code = RequestCode.DELETE_TOPIC_IN_NAMESRV
    topic: str
    cluster: str = ""


class CleanExpiredConsumeQueueRequest(Request, frozen=True, tag="clean_expired_consumequeue"):
    """Drops ConsumeQueue entries and files below the CommitLog's min offset, and the queues
    wholly below it. Served by remoting and, forwarded untouched, by the store."""

    code = RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE


class QueuesCleanedReply(Reply, frozen=True, tag="queues_cleaned"):
    queues: int  # queues removed
    files: int  # ConsumeQueue files deleted
    entries: int = 0  # entries dropped from queues that stay


class GetBrokerConfigRequest(Request, frozen=True, tag="get_broker_config"):
    code = RequestCode.GET_BROKER_CONFIG


class BrokerConfigReply(Reply, frozen=True, tag="broker_config"):
    config: dict[str, str]  # broker.conf key -> value in force
    live_keys: list[str] = []  # the keys updateBrokerConfig changes without a restart


class UpdateBrokerConfigRequest(Request, frozen=True, tag="update_broker_config"):
    """Changes broker.conf keys in the running broker and keeps them in
    <storePathRootDir>/config/broker-overlay.conf; keys that need a restart are refused.
    Remoting forwards the store's keys to its store with StoreUpdateConfigRequest."""

    code = RequestCode.UPDATE_BROKER_CONFIG
    properties: dict[str, str]


class WipeWritePermRequest(Request, frozen=True, tag="wipe_write_perm"):
    """Name server: routes stop offering the broker's queues for writing until
    AddWritePermRequest, re-registrations included (drains a broker)."""

    code = RequestCode.WIPE_WRITE_PERM_OF_BROKER
    broker_name: str


class AddWritePermRequest(Request, frozen=True, tag="add_write_perm"):
    code = RequestCode.ADD_WRITE_PERM_OF_BROKER
    broker_name: str


class WritePermReply(Reply, frozen=True, tag="write_perm_reply"):
    topics: int  # topics of the broker whose route changed


class ClientConnection(msgspec.Struct, frozen=True, omit_defaults=True):
    client_id: str
    client_addr: str = ""
    language: str = ""
    version: str = ""
    last_heartbeat_ms: int = 0


class GetConsumerConnectionListRequest(Request, frozen=True, tag="get_consumer_connection_list"):
    code = RequestCode.GET_CONSUMER_CONNECTION_LIST
    consumer_group: str


class ConsumerConnectionReply(Reply, frozen=True, tag="consumer_connections"):
    connections: list[ClientConnection]
    consume_type: str = ""
    message_model: str = ""
    consume_from: str = ""
    subscriptions: list[SubscriptionData] = []


class GetProducerConnectionListRequest(Request, frozen=True, tag="get_producer_connection_list"):
    code = RequestCode.GET_PRODUCER_CONNECTION_LIST
    producer_group: str


class ProducerConnectionReply(Reply, frozen=True, tag="producer_connections"):
    connections: list[ClientConnection]
    # every producer group with a live producer on this broker (the console lists them)
    groups: list[str] = []


class ResetOffsetRequest(Request, frozen=True, tag="reset_offset"):
    """Sets a group's committed offsets of a topic's queues on this broker and tells the
    group's live members (ResetOffsetNotice) to go on from them."""

    code = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET
    consumer_group: str
    topic: str
    offsets: list[OffsetEntry]
    timestamp_ms: int = -1  # what the offsets were searched for (logged only)


class ResetOffsetReply(Reply, frozen=True, tag="reset_offset_reply"):
    notified: int  # live members told


class ResetOffsetNotice(Reply, frozen=True, tag="reset_consumer_client_offset"):
    """Sent by the broker, unasked, to each live member of a group after ResetOffsetRequest."""

    consumer_group: str
    topic: str
    offsets: list[OffsetEntry]
    broker_name: str = ""  # the broker whose queues these are


class GetBrokerStatsRequest(Request, frozen=True, tag="view_broker_stats"):
    code = RequestCode.VIEW_BROKER_STATS_DATA


class TopicTraffic(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    group: str  # "" for messages put
    total: int  # since the broker started
    tps: float  # over the last window_ms


class BrokerStatsReply(Reply, frozen=True, tag="broker_stats"):
    put: list[TopicTraffic]
    get: list[TopicTraffic]
    window_ms: int = 0


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
AdminRequest: TypeAlias = (
    UpdateSubscriptionGroupRequest
    | GetAllSubscriptionGroupRequest
    | DeleteSubscriptionGroupRequest
    | DeleteTopicRequest
    | DeleteTopicInNamesrvRequest
    | CleanExpiredConsumeQueueRequest
    | GetBrokerConfigRequest
    | UpdateBrokerConfigRequest
    | WipeWritePermRequest
    | AddWritePermRequest
    | GetConsumerConnectionListRequest
    | GetProducerConnectionListRequest
    | ResetOffsetRequest
    | GetBrokerStatsRequest
)

AdminReply: TypeAlias = (
    SubscriptionGroupListReply
    | QueuesCleanedReply
    | BrokerConfigReply
    | WritePermReply
    | ConsumerConnectionReply
    | ProducerConnectionReply
    | ResetOffsetReply
    | ResetOffsetNotice
    | BrokerStatsReply
)
