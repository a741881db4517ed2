"""Admin: the operations behind `ferry admin` (mqadmin) in one object.

with Admin("127.0.0.1:9876") as admin:
    admin.create_topic("orders", cluster="DefaultCluster")

Admin is a BrokerLocator (the started client, routes and requests; ferry.admin.locator) with
the ACL commands (ferry.admin.auth); each other operation is a function of a module of its
area (topics, offsets, groups, broker_ops, consume_progress, queries), which Admin calls with
itself, so that those modules need only the locator's public calls.
"""

from __future__ import annotations

from collections.abc import Iterator

from ferry.admin import (
    broker_ops,
    consume_progress,
    groups,
    pop_progress,
    queries,
    topics,
)
from ferry.admin import offsets as offset_ops
from ferry.admin.auth import AuthAdmin
from ferry.admin.consume_progress import GroupLag, QueueProgress
from ferry.admin.offsets import Progress
from ferry.client.message import MessageExt, MessageQueue
from ferry.client.message_selector import Expression
from ferry.protocol.codes import Perm
from ferry.protocol.messages import (
    MAX_QUERY_MS,
    BrokerConfigReply,
    BrokerEpochReply,
    BrokerStatsReply,
    ConsumerConnectionReply,
    ProducerConnectionReply,
    QueuesCleanedReply,
    QueueStat,
    SchedulerStatusReply,
    SubscriptionGroupConfig,
    TopicConfig,
)
from ferry.protocol.names import check_group


class Admin(AuthAdmin):
    """Options: see AdminOptions. Name servers, routes and raw requests: see BrokerLocator
    (topic_list, topic_route, cluster_info, master_addrs, group_addrs, queues, ...)."""

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
        return topics.create_topic(
            self,
            topic,
            read_queue_nums,
            write_queue_nums,
            perm,
            cluster=cluster,
            broker_addr=broker_addr,
        )

    def topic_configs(self, broker_addr: str) -> list[TopicConfig]:
        return topics.topic_configs(self, broker_addr)

    def topic_stats(self, topic: str) -> dict[str, list[QueueStat]]:
        """broker name -> min/max offset of each queue of `topic` on it."""
        return topics.topic_stats(self, topic)

    def delete_topic(self, topic: str, cluster: str | None = None) -> dict[str, QueuesCleanedReply]:
        """Deletes a topic from its brokers (config, offsets, ConsumeQueues; the CommitLog
        keeps its records until retention) and from every name server."""
        return topics.delete_topic(self, topic, cluster)

    def update_topic_perm(
        self, topic: str, perm: int, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        return topics.update_topic_perm(self, topic, perm, cluster=cluster, broker_addr=broker_addr)

    # ---- brokers ----

    def scheduler_status(self, broker_addr: str) -> SchedulerStatusReply:
        """The broker's scheduler: each delay level's progress, the timers pending."""
        return broker_ops.scheduler_status(self, broker_addr)

    def broker_epoch(self, broker_addr: str) -> BrokerEpochReply:
        """getBrokerEpoch: a broker's epoch file (controller mode), as its log holds it."""
        return broker_ops.broker_epoch(self, broker_addr)

    def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return broker_ops.broker_runtime_info(self, broker_addr)

    def broker_stats(self, broker_addr: str) -> BrokerStatsReply:
        return broker_ops.broker_stats(self, broker_addr)

    def broker_config(self, broker_addr: str) -> BrokerConfigReply:
        return broker_ops.broker_config(self, broker_addr)

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
        return broker_ops.update_broker_config(
            self,
            properties,
            cluster=cluster,
            broker_addr=broker_addr,
            include_slaves=include_slaves,
        )

    def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        return broker_ops.set_write_perm(self, broker_name, writable=False)

    def add_write_perm(self, broker_name: str) -> dict[str, int]:
        return broker_ops.set_write_perm(self, broker_name, writable=True)

    def clean_expired_cq(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, QueuesCleanedReply]:
        return broker_ops.clean_expired_cq(self, cluster=cluster, broker_addr=broker_addr)

    # ---- offsets ----

    def max_offset(self, queue: MessageQueue) -> int:
        return offset_ops.max_offset(self, queue)

    def min_offset(self, queue: MessageQueue) -> int:
        return offset_ops.min_offset(self, queue)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of `queue` stored at or after timestamp_ms."""
        return offset_ops.search_offset(self, queue, timestamp_ms)

    def consumer_offset(self, group: str, queue: MessageQueue) -> int | None:
        """The group's committed offset of `queue`; None when it has none."""
        return offset_ops.consumer_offset(self, group, queue)

    def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        """Sets the group's committed offset of `queue` on its broker."""
        offset_ops.update_consumer_offset(self, group, queue, offset)

    def reset_offset_by_time(
        self,
        group: str,
        topic: str,
        timestamp_ms: int,
        progress: Progress | None = None,
        queues: list[MessageQueue] | None = None,
    ) -> dict[MessageQueue, int]:
        """Moves the group's committed offset of every queue of `topic` (or of `queues`) to
        the first message stored at or after timestamp_ms (mqadmin resetOffsetByTime);
        returns the new offsets. The brokers tell the group's live members, which go on from
        the new offsets. progress(done, total) is called as the queues' offsets are found."""
        return offset_ops.reset_offset_by_time(self, group, topic, timestamp_ms, progress, queues)

    def reset_offsets(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Sets the group's offsets of the given queues of `topic`, telling its live members
        (mqadmin resetOffsetByTime -o); an offset past a queue's max offset is refused."""
        offset_ops.reset_offsets(self, group, topic, offsets)

    # ---- consumer groups ----

    def consumer_groups(self, topic: str) -> list[str]:
        """Groups consuming `topic` (a live member subscribed, or an offset committed), over
        every broker serving it (mqadmin's queryTopicConsumeByWho)."""
        return groups.consumer_groups(self, topic)

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
        return groups.consumer_ids(self, group, broker_addr)

    def consumer_connections(self, group: str) -> dict[str, ConsumerConnectionReply]:
        return groups.consumer_connections(self, group)

    def producer_connections(
        self, group: str, topic: str | None = None
    ) -> dict[str, ProducerConnectionReply]:
        return groups.producer_connections(self, group, topic)

    def sub_groups(self, broker_addr: str) -> list[SubscriptionGroupConfig]:
        return groups.sub_groups(self, broker_addr)

    def update_sub_group(
        self,
        config: SubscriptionGroupConfig,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        return groups.update_sub_group(self, config, cluster=cluster, broker_addr=broker_addr)

    def delete_sub_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        clean_offset: bool = False,
    ) -> list[str]:
        return groups.delete_sub_group(
            self, group, cluster=cluster, broker_addr=broker_addr, clean_offset=clean_offset
        )

    # ---- message queries (ferry.admin.queries) ----

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

    def print_msg(
        self, topic: str, begin_ms: int = 0, end_ms: int = MAX_QUERY_MS
    ) -> Iterator[MessageExt]:
        """Every message of `topic` stored within [begin_ms, end_ms] (mqadmin printMsg)."""
        return queries.print_msg(self, topic, begin_ms, end_ms)
