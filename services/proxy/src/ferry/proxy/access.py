"""What each MessagingService call needs when authorization is on, in Ferry's terms
(ferry.runtime.security.permissions.Need), so that Ferry's own Guard and ACLs decide.

The mapping is RocketMQ 5's (its gRPC authorization context builder): a send, an end of
transaction and a recall need Pub on the topic; a receive, ack, forward to the DLQ and an
assignment need Sub on the group and the topic; a route lookup needs Pub or Sub on the topic;
a consumer's heartbeat and a named termination need Sub on the group (a producer's need
nothing beyond authentication); a Telemetry Settings needs Pub on each published topic, or
Sub on the group and on each subscribed topic (other commands need nothing more).

Where Ferry is stricter than RocketMQ: a send is checked on every message's topic (RocketMQ
looks at the first only); ChangeInvisibleDuration needs Sub on the topic as well as the group;
the offset calls RocketMQ leaves unchecked (PullMessage, UpdateOffset, GetOffset,
QueryOffset, SyncLiteSubscription) need Sub as a receive does; a method this table does not
know (a newer protocol's) needs a Super user until someone decides.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.proxy.protocol import ClientType, Pb
from ferry.runtime.security.permissions import SUPER, Need, Needs

PUB = ("Pub",)
SUB = ("Sub",)
ROUTE = ("Pub", "Sub")
CONSUMERS = frozenset(
    int(t)
    for t in (
        ClientType.PUSH_CONSUMER,
        ClientType.SIMPLE_CONSUMER,
        ClientType.PULL_CONSUMER,
        ClientType.LITE_PUSH_CONSUMER,
        ClientType.LITE_SIMPLE_CONSUMER,
    )
)

Rule = Callable[[Pb], Needs]


def _topic(resource: Pb, actions: tuple[str, ...]) -> Need:
    return Need("Topic", str(resource.name), actions)


def _group(resource: Pb) -> Need:
    return Need("Group", str(resource.name), SUB)


def _sub(request: Pb) -> Needs:
    """Group and topic, the topic named by the request itself."""
    return [_group(request.group), _topic(request.topic, SUB)]


def _sub_queue(request: Pb) -> Needs:
    """Group and topic, the topic named by the request's message queue."""
    return [_group(request.group), _topic(request.message_queue.topic, SUB)]


def _send(request: Pb) -> Needs:
    topics = sorted({str(m.topic.name) for m in request.messages})
    return [Need("Topic", t, PUB) for t in topics]


def _pub(request: Pb) -> Needs:
    return [_topic(request.topic, PUB)]


def _route(request: Pb) -> Needs:
    return [_topic(request.topic, ROUTE)]


def _heartbeat(request: Pb) -> Needs:
    if int(request.client_type) not in CONSUMERS:
        return []
    return [_group(request.group)]


def _termination(request: Pb) -> Needs:
    return [_group(request.group)] if request.group.name else []


def _query_offset(request: Pb) -> Needs:
    return [_topic(request.message_queue.topic, ("Sub", "Get"))]


RULES: dict[str, Rule] = {
    "QueryRoute": _route,
    "Heartbeat": _heartbeat,
    "SendMessage": _send,
    "QueryAssignment": _sub,
    "ReceiveMessage": _sub_queue,
    "AckMessage": _sub,
    "ForwardMessageToDeadLetterQueue": _sub,
    "PullMessage": _sub_queue,
    "UpdateOffset": _sub_queue,
    "GetOffset": _sub_queue,
    "QueryOffset": _query_offset,
    "EndTransaction": _pub,
    "NotifyClientTermination": _termination,
    "ChangeInvisibleDuration": _sub,
    "RecallMessage": _pub,
    "SyncLiteSubscription": _sub,
}


def needs(method: str, request: Pb) -> Needs:
    """What a unary or server-streaming call needs (Telemetry: telemetry_needs)."""
    rule = RULES.get(method)
    if rule is None:
        return SUPER
    return rule(request)


def telemetry_needs(command: Pb) -> Needs:
    """What one command of a Telemetry stream needs: only a Settings names resources."""
    if command.WhichOneof("command") != "settings":
        return []
    settings = command.settings
    found: list[Need] = []
    if settings.HasField("publishing"):
        found += [_topic(t, PUB) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        subscription = settings.subscription
        found.append(_group(subscription.group))
        found += [_topic(e.topic, SUB) for e in subscription.subscriptions]
    return found
