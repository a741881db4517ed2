"""What each request type needs when authorization is on: the one table, by request type.

A request needs either the cluster's own identity (INTERNAL: the services' requests to each
other, which no user may send), a Super user (SUPER: managing users and ACLs), or a list of
resource permissions, each met by any one of its actions (a route lookup is allowed to a user
who may Pub, Sub or Get the topic). tests/integration/test_security_refusals.py walks the
protocol's request union through this table, so a new request type cannot be forgotten:
one without a rule is INTERNAL, sent by no user, until someone decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ferry.protocol import messages as m
from ferry.protocol.messages.reply import reply_topic


@dataclass(frozen=True)
class Need:
    """A permission on one resource ("Cluster", "Topic" or "Group"), met by any of actions."""

    kind: str
    name: str
    actions: tuple[str, ...]

    def __str__(self) -> str:
        return f"{'|'.join(self.actions)} on {self.kind}:{self.name}"


INTERNAL = "internal"  # only the cluster's own services
SUPER = "super"  # only a Super user

Needs = list[Need] | str
Rule = Callable[[Any, str], Needs]  # (request, cluster name) -> needs

GET = ("Get",)
LIST = ("List",)
UPDATE = ("Update",)
READ_TOPIC = ("Sub", "Get")


def _topic(field: str, actions: tuple[str, ...]) -> Rule:
    return lambda req, _c: [Need("Topic", getattr(req, field), actions)]


def _group(field: str, actions: tuple[str, ...]) -> Rule:
    return lambda req, _c: [Need("Group", getattr(req, field), actions)]


def _cluster(actions: tuple[str, ...]) -> Rule:
    return lambda _req, cluster: [Need("Cluster", cluster, actions)]


def _internal(_req: Any, _c: str) -> Needs:
    return INTERNAL


def _super(_req: Any, _c: str) -> Needs:
    return SUPER


def _pull(req: m.PullMessageRequest, _c: str) -> Needs:
    return [Need("Topic", req.topic, ("Sub",)), Need("Group", req.consumer_group, ("Sub",))]


def _pop(req: Any, _c: str) -> Needs:
    # pop, ack and change of invisible time: as a pull (the handle's group is checked too)
    return [Need("Topic", req.topic, ("Sub",)), Need("Group", req.consumer_group, ("Sub",))]


def _poll_replies(_req: m.PollRepliesRequest, cluster: str) -> Needs:
    # a requester takes its replies from the cluster's reply topic: as a subscriber would
    return [Need("Topic", reply_topic(cluster), ("Sub",))]


def _batch_ack(req: m.BatchAckMessageRequest, _c: str) -> Needs:
    needs = [Need("Group", req.consumer_group, ("Sub",))]
    return needs + [Need("Topic", t, ("Sub",)) for t in sorted({e.topic for e in req.entries})]


def _heartbeat(req: m.HeartbeatRequest, _c: str) -> Needs:
    # producers' heartbeats need nothing beyond authentication, as in RocketMQ
    return [Need("Group", c.group, ("Sub",)) for c in req.consumers]


def _unregister_client(req: m.UnregisterClientRequest, _c: str) -> Needs:
    if req.consumer_group:
        return [Need("Group", req.consumer_group, ("Sub",))]
    return []


def _commit(req: m.UpdateConsumerOffsetRequest, _c: str) -> Needs:
    needs = [Need("Group", req.consumer_group, ("Sub", "Update"))]
    needs += [Need("Topic", t, ("Sub",)) for t in sorted({e.topic for e in req.entries})]
    return needs


def _query_offset(req: m.QueryConsumerOffsetRequest, _c: str) -> Needs:
    return [
        Need("Group", req.consumer_group, ("Sub", "Get")),
        Need("Topic", req.topic, READ_TOPIC),
    ]


def _send_back(req: m.ConsumerSendMsgBackRequest, _c: str) -> Needs:
    return [
        Need("Group", req.consumer_group, ("Sub",)),
        Need("Topic", req.origin_topic, ("Sub",)),
    ]


def _end_transaction(req: m.EndTransactionRequest, _c: str) -> Needs:
    # the topic, which remoting checks is the half message's own; older clients name none
    if req.topic:
        return [Need("Topic", req.topic, ("Pub",))]
    return [Need("Group", req.producer_group, ("Pub",))]


def _reset_offset(req: m.ResetOffsetRequest, _c: str) -> Needs:
    return [Need("Group", req.consumer_group, UPDATE), Need("Topic", req.topic, READ_TOPIC)]


def _update_topic(req: m.UpdateTopicRequest, _c: str) -> Needs:
    return [Need("Topic", req.config.topic_name, ("Create", "Update"))]


def _update_group(req: m.UpdateSubscriptionGroupRequest, _c: str) -> Needs:
    return [Need("Group", req.config.group_name, ("Create", "Update"))]


RULES: dict[type[Any], Rule] = {
    # every service
    m.PingRequest: _cluster(GET),
    m.MetricsRequest: _cluster(GET),
    # name server
    m.RegisterBrokerRequest: _internal,
    m.UnregisterBrokerRequest: _internal,
    m.GetRouteInfoRequest: _topic("topic", ("Pub", "Sub", "Get")),
    m.GetClusterInfoRequest: _cluster(GET),
    m.GetAllTopicListRequest: _cluster(LIST),
    m.DeleteTopicInNamesrvRequest: _topic("topic", ("Delete",)),
    m.WipeWritePermRequest: _cluster(UPDATE),
    m.AddWritePermRequest: _cluster(UPDATE),
    m.GetNamesrvConfigRequest: _cluster(GET),
    m.UpdateNamesrvConfigRequest: _cluster(UPDATE),
    m.GetKvConfigRequest: _cluster(GET),
    m.PutKvConfigRequest: _cluster(UPDATE),
    m.DeleteKvConfigRequest: _cluster(UPDATE),
    # broker: clients
    m.SendMessageRequest: _topic("topic", ("Pub",)),
    m.PullMessageRequest: _pull,
    m.PopMessageRequest: _pop,
    m.AckMessageRequest: _pop,
    m.BatchAckMessageRequest: _batch_ack,
    m.ChangeInvisibleTimeRequest: _pop,
    m.SendReplyRequest: _topic("topic", ("Pub",)),  # the cluster's reply topic
    m.PollRepliesRequest: _poll_replies,
    m.QueryConsumerOffsetRequest: _query_offset,
    m.UpdateConsumerOffsetRequest: _commit,
    m.GetMaxOffsetRequest: _topic("topic", READ_TOPIC),
    m.GetMinOffsetRequest: _topic("topic", READ_TOPIC),
    m.SearchOffsetByTimestampRequest: _topic("topic", READ_TOPIC),
    m.HeartbeatRequest: _heartbeat,
    m.UnregisterClientRequest: _unregister_client,
    m.GetConsumerListByGroupRequest: _group("consumer_group", ("Sub", "Get")),
    m.ConsumerSendMsgBackRequest: _send_back,
    m.LockBatchRequest: _group("consumer_group", ("Sub",)),
    m.UnlockBatchRequest: _group("consumer_group", ("Sub",)),
    m.EndTransactionRequest: _end_transaction,
    m.QueryMessageRequest: _topic("topic", READ_TOPIC),
    m.ViewMessageRequest: _cluster(GET),  # by offset: any topic's message
    # broker: administration
    m.UpdateTopicRequest: _update_topic,
    m.DeleteTopicRequest: _topic("topic", ("Delete",)),
    m.GetAllTopicConfigRequest: _cluster(LIST),
    m.GetTopicStatsRequest: _topic("topic", GET),
    m.QueryTopicConsumeByWhoRequest: _topic("topic", GET),
    m.GetBrokerRuntimeInfoRequest: _cluster(GET),
    m.GetBrokerStatsRequest: _cluster(GET),
    m.GetBrokerConfigRequest: _cluster(GET),
    m.UpdateBrokerConfigRequest: _cluster(UPDATE),
    m.DeleteExpiredCommitLogRequest: _cluster(UPDATE),
    m.CleanExpiredConsumeQueueRequest: _cluster(UPDATE),
    m.UpdateSubscriptionGroupRequest: _update_group,
    m.GetAllSubscriptionGroupRequest: _cluster(LIST),
    m.DeleteSubscriptionGroupRequest: _group("group_name", ("Delete",)),
    m.GetConsumerConnectionListRequest: _group("consumer_group", GET),
    m.GetProducerConnectionListRequest: _group("producer_group", GET),
    m.ResetOffsetRequest: _reset_offset,
    m.SchedulerStatusRequest: _cluster(GET),
    m.GetBrokerEpochRequest: _cluster(GET),
    m.QueryConsumeQueueRequest: _topic("topic", READ_TOPIC),
    m.GetBrokerHaStatusRequest: _cluster(GET),
    # controller: administration (registration and heartbeats are the brokers')
    m.ControllerGetSyncStateDataRequest: _cluster(GET),
    m.ControllerGetMetadataRequest: _cluster(GET),
    m.ControllerElectMasterRequest: _cluster(UPDATE),
    m.ControllerCleanBrokerDataRequest: _cluster(UPDATE),
}

# Requests only the cluster's services send one another: store, index, scheduler, check-back
# and HA ports serve nothing else, and remoting, name servers and controllers take these from
# no user.
INTERNAL_TYPES: tuple[type[Any], ...] = (
    m.StorePutRequest,
    m.StoreGetRequest,
    m.StoreQueueOffsetsRequest,
    m.StoreReadLogRequest,
    m.StoreStatusRequest,
    m.StoreDeleteTopicRequest,
    m.StoreUpdateConfigRequest,
    m.StoreConfirmOffsetRequest,
    m.IndexQueryRequest,
    m.IndexStatusRequest,
    m.IndexRebuildRequest,
    m.SchedulerProgressRequest,
    m.SchedulerAdoptProgressRequest,
    m.PopCheckpointRequest,
    m.TransactionChecksRequest,
    m.TransactionStateRequest,
    m.TransactionCheckStatusRequest,
    m.StoreReadRawRequest,
    m.StoreAppendRawRequest,
    m.StoreLogDigestRequest,
    m.HaHelloRequest,
    m.HaTransferRequest,
    m.HaWaitAckRequest,
    m.HaStatusRequest,
    m.SlaveSyncRequest,
    m.GrantWriteLeaseRequest,
    m.ControllerRegisterBrokerRequest,
    m.ControllerHeartbeatRequest,
    m.TreeStatusRequest,
    m.TreeReconfigureRequest,
)
RULES.update(dict.fromkeys(INTERNAL_TYPES, _internal))

# Users and ACLs (ferry.protocol.messages.auth): Super users only; the snapshot that carries
# them to slaves and name servers is internal.
for _type in m.request_types():
    if _type.__module__ == "ferry.protocol.messages.auth":
        RULES[_type] = _internal if _type.__name__ == "GetAuthSnapshotRequest" else _super


def needs(req: Any, cluster: str) -> Needs:
    rule = RULES.get(type(req))
    if rule is None:
        return INTERNAL  # see the module's doc
    return rule(req, cluster)


def known(request_type: type[Any]) -> bool:
    return request_type in RULES
