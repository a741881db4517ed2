"""Admin: the operations behind `ferry admin` (mqadmin): topics, routes, clusters, offsets;
users and ACLs (ferry.client.auth_admin)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from ferry.client import admin_ops, consume_progress, pop_progress, queries
from ferry.client.admin_options import AdminOptions
from ferry.client.auth_admin import AuthAdminMixin
from ferry.client.consume_progress import GroupLag, QueueProgress
from ferry.client.instance import ClientInstance, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import MessageExt, MessageQueue
from ferry.client.message_selector import Expression
from ferry.client.transport import expect, wait
from ferry.protocol.codes import Perm
from ferry.protocol.errors import (
    BrokerNotExistError,
    FerryError,
    InvalidParameterError,
    QueryNotFoundError,
)
from ferry.protocol.messages import (
    MAX_QUERY_MS,
    AnyRequest,
    BrokerConfigReply,
    BrokerEpochReply,
    BrokerRuntimeInfoReply,
    BrokerStatsReply,
    ClusterInfoReply,
    ConsumerConnectionReply,
    ConsumerListReply,
    GetAllTopicConfigRequest,
    GetAllTopicListRequest,
    GetBrokerEpochRequest,
    GetBrokerRuntimeInfoRequest,
    GetClusterInfoRequest,
    GetConsumerListByGroupRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    GetRouteInfoRequest,
    GetTopicStatsRequest,
    GroupListReply,
    OffsetEntry,
    OffsetReply,
    OkReply,
    ProducerConnectionReply,
    QueryConsumerOffsetRequest,
    QueryTopicConsumeByWhoRequest,
    QueuesCleanedReply,
    QueueStat,
    Reply,
    RouteInfoReply,
    SchedulerStatusReply,
    SchedulerStatusRequest,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicConfigListReply,
    TopicListReply,
    TopicRouteData,
    TopicStatsReply,
    UpdateConsumerOffsetRequest,
    UpdateTopicRequest,
)
from ferry.protocol.names import check_group, check_topic

MASTER_ID = 0
R = TypeVar("R", bound=Reply)


class Admin(AdminOptions, AuthAdminMixin, Lifecycle):
    """Options: see AdminOptions."""

    _instance: ClientInstance | None = None

    def start(self) -> None:
        if self._instance is None:
            self._instance = ClientInstance(
                self.namesrv,
                role="admin",
                api_timeout_s=self._timeout_s,
                credentials=self.credentials,
                tls_server_key=self.tls_server_key,
            )

    def shutdown(self) -> None:
        inst, self._instance = self._instance, None
        if inst is not None:
            inst.close()

    def _started(self) -> ClientInstance:
        if self._instance is None:
            raise not_started("admin")
        return self._instance

    def _broker(self, addr: str, body: AnyRequest, cls: type[R]) -> R:
        """A broker's reply; its errors name the broker."""
        return admin_ops.broker_request(self, addr, body, cls)

    def _namesrv(self, body: AnyRequest, cls: type[R]) -> R:
        """Any name server's reply; its errors name the name servers asked."""
        try:
            return self._started().routes.namesrv_request(body, cls)
        except FerryError as err:
            raise admin_ops.at(err, f"name server {self.namesrv}") from None

    # ---- name server ----

    def topic_list(self) -> list[str]:
        return list(self._namesrv(GetAllTopicListRequest(), TopicListReply).topics)

    def topic_route(self, topic: str) -> TopicRouteData:
        """TopicNotExistError when no broker serves the topic."""
        return self._namesrv(GetRouteInfoRequest(topic=topic), RouteInfoReply).route

    def cluster_info(self) -> ClusterInfoReply:
        return self._namesrv(GetClusterInfoRequest(), ClusterInfoReply)

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, of one cluster or of all."""
        info = self.cluster_info()
        out: dict[str, str] = {}
        for name in sorted(admin_ops.broker_names(info, cluster)):
            data = info.brokers.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out[name] = data.broker_addrs[MASTER_ID]
        return out

    # ---- topics ----

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = Perm.READ_WRITE,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Creates or updates `topic` on one broker (broker_addr) or on the master of every
        broker of `cluster` (every cluster when neither is given); returns the addresses
        updated."""
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
        addrs = [broker_addr] if broker_addr else sorted(set(self.master_addrs(cluster).values()))
        if not addrs:
            raise BrokerNotExistError(f"no broker master in {cluster or 'any cluster'}")
        inst = self._started()
        body = UpdateTopicRequest(config=config)
        futures = [
            (a, inst.connection(a).submit(body, timeout_s=inst.api_timeout_s)) for a in addrs
        ]
        for addr, future in futures:
            expect(wait(future, inst.api_timeout_s, addr), OkReply)
        inst.routes.invalidate(topic)
        return addrs

    def scheduler_status(self, broker_addr: str) -> SchedulerStatusReply:
        """The broker's scheduler: each delay level's progress, the timers pending."""
        return self._broker(broker_addr, SchedulerStatusRequest(), SchedulerStatusReply)

    def broker_epoch(self, broker_addr: str) -> BrokerEpochReply:
        """getBrokerEpoch: a broker's epoch file (controller mode), as its log holds it."""
        return self._broker(broker_addr, GetBrokerEpochRequest(), BrokerEpochReply)

    def group_addrs(self, broker_name: str | None = None, cluster: str | None = None) -> list[str]:
        """Every replica's address (master and slaves) of one broker group, of a cluster's
        groups, or of all."""
        info = self.cluster_info()
        names = [broker_name] if broker_name else info.clusters.get(cluster or "", [])
        if not broker_name and not cluster:
            names = list(info.brokers)
        return [
            addr
            for name in sorted(names)
            if (data := info.brokers.get(name)) is not None
            for _id, addr in sorted(data.broker_addrs.items())
        ]

    def topic_configs(self, broker_addr: str) -> list[TopicConfig]:
        reply = self._broker(broker_addr, GetAllTopicConfigRequest(), TopicConfigListReply)
        return list(reply.topics)

    def topic_stats(self, topic: str) -> dict[str, list[QueueStat]]:
        """broker name -> min/max offset of each queue of `topic` on it."""
        route = self.topic_route(topic)
        out: dict[str, list[QueueStat]] = {}
        for data in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = data.broker_addrs.get(MASTER_ID) or next(iter(data.broker_addrs.values()), "")
            if not addr:
                continue
            reply = self._broker(addr, GetTopicStatsRequest(topic=topic), TopicStatsReply)
            out[data.broker_name] = sorted(reply.queues, key=lambda q: q.queue_id)
        return out

    def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        reply = self._broker(broker_addr, GetBrokerRuntimeInfoRequest(), BrokerRuntimeInfoReply)
        return dict(reply.info)

    # ---- offsets ----

    def _queue_addr(self, queue: MessageQueue) -> str:
        routes = self._started().routes
        routes.get(queue.topic)
        addr = routes.addr_of(queue.broker_name)
        if addr is None:
            raise BrokerNotExistError(f"no master address for broker {queue.broker_name}")
        return addr

    def _offset(self, queue: MessageQueue, body: AnyRequest) -> int:
        return self._broker(self._queue_addr(queue), body, OffsetReply).offset

    def max_offset(self, queue: MessageQueue) -> int:
        return self._offset(queue, GetMaxOffsetRequest(topic=queue.topic, queue_id=queue.queue_id))

    def min_offset(self, queue: MessageQueue) -> int:
        return self._offset(queue, GetMinOffsetRequest(topic=queue.topic, queue_id=queue.queue_id))

    def consumer_offset(self, group: str, queue: MessageQueue) -> int | None:
        """The group's committed offset of `queue`; None when it has none."""
        check_group(group)
        body = QueryConsumerOffsetRequest(group, queue.topic, queue.queue_id)
        try:
            return self._offset(queue, body)
        except QueryNotFoundError:
            return None

    def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        """Sets the group's committed offset of `queue` on its broker."""
        check_group(group)
        entry = OffsetEntry(queue.topic, queue.queue_id, offset)
        body = UpdateConsumerOffsetRequest(consumer_group=group, entries=[entry])
        self._broker(self._queue_addr(queue), body, OkReply)

    def reset_offset_by_time(
        self,
        group: str,
        topic: str,
        timestamp_ms: int,
        progress: admin_ops.Progress | None = None,
        queues: list[MessageQueue] | None = None,
    ) -> dict[MessageQueue, int]:
        """Moves the group's committed offset of every queue of `topic` (or of `queues`) to
        the first message stored at or after timestamp_ms (mqadmin resetOffsetByTime);
        returns the new offsets. The brokers tell the group's live members, which go on from
        the new offsets. progress(done, total) is called as the queues' offsets are found."""
        return admin_ops.reset_offset_by_time(self, group, topic, timestamp_ms, progress, queues)

    def reset_offsets(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Sets the group's offsets of the given queues of `topic`, telling its live members
        (mqadmin resetOffsetByTime -o); an offset past a queue's max offset is refused."""
        admin_ops.reset_offsets(self, group, topic, offsets)

    # ---- consumer groups ----

    def consumer_groups(self, topic: str) -> list[str]:
        """Groups consuming `topic` (a live member subscribed, or an offset committed), over
        every broker serving it (mqadmin's queryTopicConsumeByWho)."""
        route = self.topic_route(topic)
        groups: set[str] = set()
        for data in route.broker_datas:
            addr = data.broker_addrs.get(MASTER_ID) or next(iter(data.broker_addrs.values()), "")
            if addr:
                body = QueryTopicConsumeByWhoRequest(topic=topic)
                groups.update(self._broker(addr, body, GroupListReply).groups)
        return sorted(groups)

    def consumer_progress(self, group: str, topic: str) -> list[QueueProgress]:
        """Each read queue of `topic`: the broker's max offset, the group's committed offset
        and the lag between them (never negative; None where the group never committed)."""
        check_group(group)
        return consume_progress.queue_progress(self, group, topic)

    def pop_progress(self, group: str) -> list[pop_progress.PopProgress]:
        """A pop group (SimpleConsumer) per broker: messages popped, acked, revived and in
        flight, as the brokers' revive services count them; [] for a group never popped."""
        check_group(group)
        return pop_progress.pop_progress(self, group)

    def group_topics(self, group: str) -> list[str]:
        """The topics `group` consumes (its retry topic too), over every topic known."""
        check_group(group)
        return consume_progress.groups_by_topic(self).get(group, [])

    def group_lags(self, topic: str | None = None) -> list[GroupLag]:
        """Every consumer group with its total lag (over `topic` only, when given)."""
        return consume_progress.group_lags(self, topic)

    def consumer_ids(self, group: str, broker_addr: str) -> list[str]:
        """The live members of `group` a broker knows from their heartbeats, sorted."""
        check_group(group)
        body = GetConsumerListByGroupRequest(consumer_group=group)
        return sorted(self._broker(broker_addr, body, ConsumerListReply).client_ids)

    def queues(self, topic: str) -> list[MessageQueue]:
        """The read queues of `topic`, sorted."""
        return list(self._started().routes.fetch(topic).read_queues)

    # ---- message queries (ferry.client.queries) ----

    def query_msg_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int = MAX_QUERY_MS,
    ) -> list[MessageExt]:
        """Messages whose KEYS hold `key`, newest first (mqadmin queryMsgByKey)."""
        return queries.query_msg_by_key(
            self, topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms
        )

    def query_msg_by_unique_key(self, topic: str, msg_id: str) -> list[MessageExt]:
        """The stored copies of the message with client msg id `msg_id` (queryMsgByUniqueKey)."""
        return queries.query_msg_by_unique_key(self, topic, msg_id)

    def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """By offset message id, or by client msg id when a topic is given (queryMsgById)."""
        return queries.query_msg_by_id(self, msg_id, topic)

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """One message by its offset message id, without any index."""
        return queries.view_message(self, offset_msg_id)

    def query_msg_by_offset(self, queue: MessageQueue, offset: int) -> MessageExt:
        return queries.query_msg_by_offset(self, queue, offset)

    def pull(
        self,
        queue: MessageQueue,
        offset: int,
        max_msgs: int = 32,
        *,
        group: str = queries.TOOLS_CONSUMER_GROUP,
        expression: Expression = "*",
    ) -> queries.PullResult:
        """Up to max_msgs messages of `queue` from `offset` on, as `group`, with no consumer, no
        offset commit and no waiting: for readers that keep their own offsets (Spark). An
        expression (tags, or MessageSelector.by_sql) has the broker skip what it does not
        select: the offsets move past them all the same."""
        check_group(group)
        return queries.pull(self, queue, offset, max_msgs, group, expression)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of `queue` stored at or after timestamp_ms."""
        return queries.search_offset(self, queue, timestamp_ms)

    def print_msg(
        self, topic: str, begin_ms: int = 0, end_ms: int = MAX_QUERY_MS
    ) -> Iterator[MessageExt]:
        """Every message of `topic` stored within [begin_ms, end_ms] (mqadmin printMsg)."""
        return queries.print_msg(self, topic, begin_ms, end_ms)

    # ---- more of mqadmin (ferry.client.admin_ops) ----

    def delete_topic(self, topic: str, cluster: str | None = None) -> dict[str, QueuesCleanedReply]:
        """Deletes a topic from its brokers (config, offsets, ConsumeQueues; the CommitLog
        keeps its records until retention) and from every name server."""
        return admin_ops.delete_topic(self, topic, cluster)

    def update_topic_perm(
        self, topic: str, perm: int, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        return admin_ops.update_topic_perm(
            self, topic, perm, cluster=cluster, broker_addr=broker_addr
        )

    def sub_groups(self, broker_addr: str) -> list[SubscriptionGroupConfig]:
        return admin_ops.sub_groups(self, broker_addr)

    def update_sub_group(
        self,
        config: SubscriptionGroupConfig,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        return admin_ops.update_sub_group(self, config, cluster=cluster, broker_addr=broker_addr)

    def delete_sub_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        clean_offset: bool = False,
    ) -> list[str]:
        return admin_ops.delete_sub_group(
            self, group, cluster=cluster, broker_addr=broker_addr, clean_offset=clean_offset
        )

    def broker_config(self, broker_addr: str) -> BrokerConfigReply:
        return admin_ops.broker_config(self, broker_addr)

    def update_broker_config(
        self,
        properties: dict[str, str],
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        include_slaves: bool = False,
    ) -> list[str]:
        """Changes keys live and keeps them over restarts; refuses keys needing a restart.
        On one broker, or the masters of `cluster` (or of every cluster), with their slaves
        when include_slaves (mqadmin's -a). Returns the addresses changed."""
        return admin_ops.update_broker_config(
            self,
            properties,
            cluster=cluster,
            broker_addr=broker_addr,
            include_slaves=include_slaves,
        )

    def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        return admin_ops.set_write_perm(self, broker_name, writable=False)

    def add_write_perm(self, broker_name: str) -> dict[str, int]:
        return admin_ops.set_write_perm(self, broker_name, writable=True)

    def consumer_connections(self, group: str) -> dict[str, ConsumerConnectionReply]:
        return admin_ops.consumer_connections(self, group)

    def producer_connections(
        self, group: str, topic: str | None = None
    ) -> dict[str, ProducerConnectionReply]:
        return admin_ops.producer_connections(self, group, topic)

    def broker_stats(self, broker_addr: str) -> BrokerStatsReply:
        return admin_ops.broker_stats(self, broker_addr)

    def clean_expired_cq(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, QueuesCleanedReply]:
        return admin_ops.clean_expired_cq(self, cluster=cluster, broker_addr=broker_addr)
