"""The name server's RocketMQ door: RocketMQ's remoting protocol in front of the same handlers
(ferry.runtime.remoting_door). What RocketMQ clients and tools ask a name server for: routes,
cluster info, the topic list, the kv store, the name server's config, and the admin codes for
topics and write permissions. Brokers register over Ferry's own wire only.

Routes name each broker's RocketMQ door (BrokerData.rocketmq_addrs), not its Ferry address:
a RocketMQ client can speak only to the door. A broker group without a door is left out of the
route with its queues, since a queue whose broker the route does not list makes a client's
consumer start wait for ever.
"""

from __future__ import annotations

from typing import Any

from ferry.protocol.errors import TopicNotExistError
from ferry.protocol.messages import (
    AddWritePermRequest,
    BrokerData,
    ClusterInfoReply,
    DeleteKvConfigRequest,
    DeleteTopicInNamesrvRequest,
    GetAllTopicListRequest,
    GetClusterInfoRequest,
    GetKvConfigRequest,
    GetNamesrvConfigRequest,
    GetRouteInfoRequest,
    KvConfigReply,
    NamesrvConfigReply,
    PutKvConfigRequest,
    RouteInfoReply,
    TopicListReply,
    TopicRouteData,
    UpdateNamesrvConfigRequest,
    WipeWritePermRequest,
    WritePermReply,
)
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.protocol.rocketmq.fields import SUCCESS, ext, ok
from ferry.runtime.remoting_door import Route

QUERY_NOT_FOUND = 22


def _broker_json(data: BrokerData) -> dict[str, Any] | None:
    if not data.rocketmq_addrs:
        return None
    return {
        "cluster": data.cluster,
        "brokerName": data.broker_name,
        "brokerAddrs": {str(k): v for k, v in sorted(data.rocketmq_addrs.items())},
        # RocketMQ 5's field (no acting master in Ferry): the Rust client needs it present
        "enableActingMaster": False,
    }


def route_json(route: TopicRouteData) -> dict[str, Any]:
    """TopicRouteData as RocketMQ's clients read it: counts and perm as JSON numbers, each
    broker by its door address, queues only of brokers with a door."""
    brokers = [b for b in (_broker_json(d) for d in route.broker_datas) if b is not None]
    served = {b["brokerName"] for b in brokers}
    queues = [
        {
            "brokerName": q.broker_name,
            "readQueueNums": q.read_queue_nums,
            "writeQueueNums": q.write_queue_nums,
            "perm": q.perm,
            "topicSysFlag": 0,
        }
        for q in route.queue_datas
        if q.broker_name in served
    ]
    out: dict[str, Any] = {"queueDatas": queues, "brokerDatas": brokers, "filterServerTable": {}}
    if route.order_topic_conf:
        out["orderTopicConf"] = route.order_topic_conf
    return out


def _route_response(cmd: RemotingCommand, reply: RouteInfoReply, _p: Any) -> RemotingCommand:
    body = route_json(reply.route)
    if not body["brokerDatas"]:
        raise TopicNotExistError(f"No route info of this topic: {ext(cmd, 'topic')}")
    return ok(cmd, body)


def _cluster_response(cmd: RemotingCommand, reply: ClusterInfoReply, _p: Any) -> RemotingCommand:
    brokers = {name: b for name, b in ((n, _broker_json(d)) for n, d in reply.brokers.items()) if b}
    clusters = {
        cluster: sorted(n for n in names if n in brokers)
        for cluster, names in reply.clusters.items()
    }
    return ok(cmd, {"brokerAddrTable": brokers, "clusterAddrTable": clusters})


def _kv_response(cmd: RemotingCommand, reply: KvConfigReply, _p: Any) -> RemotingCommand:
    if not reply.found:
        return cmd.response(QUERY_NOT_FOUND, "No config item")
    return ok(cmd, value=reply.value)


def _config_response(cmd: RemotingCommand, reply: NamesrvConfigReply, _p: Any) -> RemotingCommand:
    # RocketMQ sends the config as java.util.Properties text
    text = "".join(f"{k}={v}\n" for k, v in sorted(reply.config.items()))
    return cmd.response(SUCCESS, body=text.encode())


def _properties(body: bytes) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in body.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def _done(cmd: RemotingCommand, _reply: Any, _p: Any) -> RemotingCommand:
    return cmd.response(SUCCESS)


def _topic_list(cmd: RemotingCommand, reply: TopicListReply, _p: Any) -> RemotingCommand:
    return ok(cmd, {"topicList": reply.topics})


def _write_perm(cmd: RemotingCommand, reply: WritePermReply, _p: Any) -> RemotingCommand:
    return ok(cmd, wipeTopicCount=str(reply.topics), addTopicCount=str(reply.topics))


def _req(fn: Any) -> Any:
    """A request builder that needs only the command."""
    return lambda cmd, _call: fn(cmd)


def routes() -> dict[int, Route]:
    def call_free(build: Any, response: Any) -> Route:
        return Route(_req(build), response)

    return {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: call_free(
            lambda c: GetRouteInfoRequest(topic=ext(c, "topic")), _route_response
        ),
        RequestCode.GET_BROKER_CLUSTER_INFO: call_free(
            lambda c: GetClusterInfoRequest(), _cluster_response
        ),
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: call_free(
            lambda c: GetAllTopicListRequest(), _topic_list
        ),
        RequestCode.PUT_KV_CONFIG: call_free(
            lambda c: PutKvConfigRequest(
                namespace=ext(c, "namespace"), key=ext(c, "key"), value=ext(c, "value")
            ),
            _done,
        ),
        RequestCode.GET_KV_CONFIG: call_free(
            lambda c: GetKvConfigRequest(namespace=ext(c, "namespace"), key=ext(c, "key")),
            _kv_response,
        ),
        RequestCode.DELETE_KV_CONFIG: call_free(
            lambda c: DeleteKvConfigRequest(namespace=ext(c, "namespace"), key=ext(c, "key")),
            _done,
        ),
        RequestCode.GET_NAMESRV_CONFIG: call_free(
            lambda c: GetNamesrvConfigRequest(), _config_response
        ),
        RequestCode.UPDATE_NAMESRV_CONFIG: call_free(
            lambda c: UpdateNamesrvConfigRequest(properties=_properties(c.body)), _done
        ),
        RequestCode.DELETE_TOPIC_IN_NAMESRV: call_free(
            lambda c: DeleteTopicInNamesrvRequest(
                topic=ext(c, "topic"), cluster=c.ext_fields.get("clusterName", "")
            ),
            _done,
        ),
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: call_free(
            lambda c: WipeWritePermRequest(broker_name=ext(c, "brokerName")), _write_perm
        ),
        RequestCode.ADD_WRITE_PERM_OF_BROKER: call_free(
            lambda c: AddWritePermRequest(broker_name=ext(c, "brokerName")), _write_perm
        ),
    }
