"""Admin requests: topic create/update, topic list and stats, broker runtime info (RocketMQ's
AdminBrokerProcessor, for the operations Ferry's protocol has)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ferry.protocol.errors import BrokerSystemError, InvalidParameterError, TopicNotExistError
from ferry.protocol.messages import (
    AnyReply,
    BrokerRuntimeInfoReply,
    ErrorReply,
    GetAllTopicConfigRequest,
    GetBrokerRuntimeInfoRequest,
    GetTopicStatsRequest,
    OkReply,
    StoreQueueOffsetsReply,
    StoreQueueOffsetsRequest,
    StoreStatusReply,
    StoreStatusRequest,
    TopicConfigListReply,
    TopicStatsReply,
    UpdateTopicRequest,
)
from ferry.protocol.names import check_topic, is_system_topic
from ferry.remoting.calls import Caller
from ferry.remoting.client_table import ClientTable
from ferry.remoting.scheduler_link import SchedulerLink
from ferry.remoting.stats import BrokerStats, now_ms
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable, check_topic_config
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.remoting.admin")

STORE_QUERY_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class BrokerIdentity:
    """What the runtime info says about this broker besides its counters."""

    cluster: str
    broker_name: str
    broker_id: int
    role: str
    addr: str
    version: str


class AdminProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        identity: BrokerIdentity,
        topics: TopicTable,
        groups: SubscriptionGroupTable,
        clients: ClientTable,
        store: Peer,
        service: Service,
        stats: BrokerStats,
        on_topics_changed: Callable[[], None],
        scheduler: SchedulerLink | None = None,
    ) -> None:
        self._config = config
        self._scheduler = scheduler or SchedulerLink(None)
        self._identity = identity
        self._topics = topics
        self._groups = groups
        self._clients = clients
        self._store = store
        self._service = service
        self._stats = stats
        self._on_topics_changed = on_topics_changed

    def update_topic(self, req: UpdateTopicRequest, _call: Caller) -> OkReply:
        config = req.config
        check_topic_config(config)
        if is_system_topic(config.topic_name):
            raise InvalidParameterError(f"topic {config.topic_name!r} is a system topic")
        if self._topics.put(config):
            log.info(
                "topic %s set: %d read / %d write queues, perm %d",
                config.topic_name,
                config.read_queue_nums,
                config.write_queue_nums,
                config.perm,
            )
            self._on_topics_changed()
        return OkReply()

    def all_topic_configs(
        self, _req: GetAllTopicConfigRequest, _call: Caller
    ) -> TopicConfigListReply:
        return TopicConfigListReply(topics=self._topics.all())

    def topic_stats(self, req: GetTopicStatsRequest, call: Caller) -> None:
        topic = self._topics.get(req.topic)
        if topic is None:
            check_topic(req.topic)
            raise TopicNotExistError(f"topic {req.topic!r} does not exist on this broker")
        queue_ids = list(range(max(topic.read_queue_nums, topic.write_queue_nums)))

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StoreQueueOffsetsReply):
                call.reply(TopicStatsReply(queues=sorted(body.queues, key=lambda q: q.queue_id)))
            elif isinstance(body, ErrorReply):
                call.reply(body)
            else:
                call.fail(BrokerSystemError(f"store answered with {type(body).__name__}"))

        self._store.request(
            StoreQueueOffsetsRequest(topic=req.topic, queue_ids=queue_ids),
            on_reply,
            timeout_s=STORE_QUERY_TIMEOUT_S,
        )

    def runtime_info(self, _req: GetBrokerRuntimeInfoRequest, call: Caller) -> None:
        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            info = self._local_info()
            if isinstance(body, StoreStatusReply):
                info.update(
                    commitLogMinOffset=str(body.min_offset),
                    commitLogMaxOffset=str(body.max_offset),
                    commitLogFlushedOffset=str(body.flushed_offset),
                    storeTopicCount=str(body.topics),
                    storeQueueCount=str(body.queues),
                    commitLogDiskRatio=f"{body.disk_used_ratio:.4f}",
                    commitLogDiskTotalBytes=str(body.disk_total_bytes),
                    commitLogDiskFreeBytes=str(body.disk_free_bytes),
                )
            elif isinstance(body, ErrorReply):
                info["storeStatus"] = f"unavailable: {body.message}"
            self._scheduler.add_runtime_info(
                info, lambda: call.reply(BrokerRuntimeInfoReply(info=info))
            )

        self._store.request(StoreStatusRequest(), on_reply, timeout_s=STORE_QUERY_TIMEOUT_S)

    def _local_info(self) -> dict[str, str]:
        ident = self._identity
        stats = self._stats
        return {
            "brokerClusterName": ident.cluster,
            "brokerName": ident.broker_name,
            "brokerId": str(ident.broker_id),
            "brokerRole": ident.role,
            "brokerAddr": ident.addr,
            "brokerVersion": ident.version,
            "brokerPermission": str(self._config.broker_permission),
            "flushDiskType": self._config.flush_disk_type,
            "bootTimestamp": str(stats.started_ms),
            "runtime": stats.uptime_text(now_ms()),
            "topicCount": str(len(self._topics)),
            "subscriptionGroupCount": str(len(self._groups)),
            "clientCount": str(len(self._clients)),
            "putMessageTotal": str(stats.put_messages),
            "putRequestTotal": str(stats.put_requests),
            "getMessageTotal": str(stats.pulled_messages),
            "pullRequestTotal": str(stats.pull_requests),
            "pullLogReadTotal": str(stats.pull_log_reads),
            "pullLogReadMisses": str(stats.pull_log_read_misses),
            "pendingRequests": str(self._service.deferred_calls),
        }
