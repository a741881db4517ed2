"""The composition root of broker-remoting's processors: each is built once, in the order of
what it needs, from constructor arguments only; nothing is rebound after construction.

handlers() is the one table of request type -> handler. The service loop serves it on the
ZeroMQ port; a protocol door in front of the same processors serves the same table through
a codec of its own (calls.py says what a handler sees of its caller).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import zmq

from ferry.protocol import messages as m
from ferry.remoting.admin import AdminProcessor, BrokerIdentity
from ferry.remoting.admin_clients import ClientAdmin
from ferry.remoting.admin_meta import MetadataAdmin
from ferry.remoting.auth_admin import AuthAdmin
from ferry.remoting.broker_epoch import broker_epoch
from ferry.remoting.calls import AfterStore, Handler, reply_now
from ferry.remoting.check_relay import TransactionCheckRelay
from ferry.remoting.client_table import ClientTable
from ferry.remoting.consumer_manage import ConsumerManager, GroupCoordination
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.end_transaction import EndTransactionProcessor
from ferry.remoting.group_topics import GroupTopics
from ferry.remoting.ha_wait import CONFIRM_REFRESH_S, SlaveAckWait
from ferry.remoting.in_sync_replicas import InSyncReplicas
from ferry.remoting.live_config import LiveConfig
from ferry.remoting.member_notices import MemberNotifier
from ferry.remoting.message_query import MessageQueryProcessor
from ferry.remoting.pop import PopProcessor, PopSettleProcessor
from ferry.remoting.pull import PullProcessor
from ferry.remoting.queue_locks import QueueLockProcessor, QueueLockTable
from ferry.remoting.registration import parse_namesrv_addr
from ferry.remoting.reply import SWEEP_INTERVAL_S as REPLY_SWEEP_S
from ferry.remoting.reply import ReplyProcessor
from ferry.remoting.scheduler_link import SchedulerLink
from ferry.remoting.send import SendProcessor
from ferry.remoting.send_back import SendBackProcessor
from ferry.remoting.slave_sync import MasterSyncProcessor, SlaveSynchronizer
from ferry.remoting.stats import SAMPLE_INTERVAL_S, BrokerStats
from ferry.remoting.store_queries import StoreQueryProcessor
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.remoting.write_lease import WriteLease, fenced
from ferry.runtime.config import BrokerConfig
from ferry.runtime.confirm_relay import ConfirmRelay
from ferry.runtime.service import Peer, Service


@dataclass(frozen=True)
class BrokerTables:
    """The broker's state, loaded from its config dir before anything is served."""

    topics: TopicTable
    groups: SubscriptionGroupTable
    offsets: ConsumerOffsetTable
    auth: AuthAdmin
    clients: ClientTable
    stats: BrokerStats


@dataclass(frozen=True)
class BrokerAddress:
    addr: str  # host:port clients reach
    ha_addr: str  # host:port of the ha-replicator
    version: str
    # the store host of the records this broker stores (and so of their offset msg ids): the
    # RocketMQ door's address when it has one, where RocketMQ clients send messages back
    store_host: str = ""


class BrokerProcessors:
    def __init__(
        self,
        config: BrokerConfig,
        service: Service,
        tables: BrokerTables,
        store: Peer,
        address: BrokerAddress,
        lease: WriteLease,
        topics_changed: Callable[[], None],
    ) -> None:
        self._config = config
        self._service = service
        self._tables = tables
        self._lease = lease
        t = tables
        addr = address.addr
        store_host = address.store_host or addr
        # the other services of the group this broker talks to
        self.checkback = connect(service, config.checkback_endpoint)
        scheduler = connect(service, config.scheduler_endpoint)
        ha = service.connect_peer(config.ha_endpoint or f"tcp://{address.ha_addr}")
        index = connect(service, config.index_endpoint)
        self.scheduler_link = SchedulerLink(scheduler, self.checkback)

        group_topics = GroupTopics(t.topics, topics_changed)
        locks = QueueLockTable()
        self.notifier = MemberNotifier()
        # controller mode, SYNC_MASTER: minInSyncReplicas and allAckInSyncStateSet
        self.isr = InSyncReplicas(config)
        self.replies = ReplyProcessor(config, t.topics, store, addr)  # request/reply
        self.pop = PopProcessor(
            config.broker_name,
            t.topics,
            t.groups,
            t.offsets,
            group_topics,
            store,
            scheduler,
            service,
            t.stats,
        )
        self.pop.apply_config(config)
        self.slave_wait = self._slave_wait(ha, store)
        answer: AfterStore = self.slave_wait.reply if self.slave_wait is not None else reply_now
        self.send = SendProcessor(
            config,
            t.topics,
            store,
            t.stats,
            store_host,
            topics_changed,
            answer=lease.gate(answer),
            stamp_request=self.replies.stamp,
            on_stored=self.pop.messages_arrived,
        )
        self.pull = PullProcessor(config, t.topics, t.groups, t.offsets, store, t.stats)
        self.consumers = ConsumerManager(
            t.clients,
            t.groups,
            t.offsets,
            store,
            GroupCoordination(self.notifier, locks, group_topics),
            check_subscription=self.pull.check_subscription,
        )
        identity = BrokerIdentity(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.registered_broker_id,
            role=config.broker_role,
            addr=addr,
            version=address.version,
        )
        self.admin = AdminProcessor(
            config,
            identity,
            t.topics,
            t.groups,
            t.clients,
            store,
            service,
            t.stats,
            topics_changed,
            self.scheduler_link,
        )
        self.send_back = SendBackProcessor(
            t.groups,
            group_topics,
            store,
            store_host,
            t.stats,
            max_level=len(config.delay_levels_ms),
            hold=bool(config.scheduler_endpoint),
        )
        self.locks = QueueLockProcessor(locks)
        self.queries = StoreQueryProcessor(t.topics, store, ha)
        self.message_query = MessageQueryProcessor(store, index)
        self.end_transaction = EndTransactionProcessor(
            store,
            store_host,
            t.stats,
            self.checkback,
            transaction_timeout_ms=config.transaction_time_out,
        )
        self.meta = MetadataAdmin(store, t.topics, t.groups, t.offsets, topics_changed)
        self.client_admin = ClientAdmin(
            t.clients, t.groups, t.offsets, self.notifier, t.stats, config.broker_name
        )
        self.live_config = LiveConfig(config, store, self._apply_config(topics_changed))
        self.master_sync = MasterSyncProcessor(t.topics, t.groups, t.offsets, self.scheduler_link)
        self.slave_sync = (
            SlaveSynchronizer(
                service,
                config.broker_name,
                parse_namesrv_addr(config.namesrv_addr),
                t.topics,
                t.groups,
                t.offsets,
                self.scheduler_link,
                master_endpoint=config.master_endpoint,
                auth=t.auth,
            )
            if config.broker_role == "SLAVE"
            else None
        )
        # a killed store never answers what it held: its long polls are answered empty (the
        # consumer pulls again) and its puts failed as retriable (the producer sends again)
        store.watch(zmq.EVENT_DISCONNECTED, self._store_lost)

    def _slave_wait(self, ha: Peer, store: Peer) -> SlaveAckWait | None:
        """SYNC_MASTER: a stored send is answered once a slave acked it (ha_wait.py)."""
        config = self._config
        if config.broker_role != "SYNC_MASTER":
            return None
        # controller mode: the store's readers see only what the whole in-sync set holds
        confirm = ConfirmRelay(store) if config.reads_gated else None
        wait = SlaveAckWait(ha, config.sync_flush_timeout, self.isr, confirm)
        if self.isr.enforced:
            self.isr.listen(wait.set_changed)
        return wait

    def _store_lost(self) -> None:
        self.pull.store_lost()
        self.send.store_lost()

    def _apply_config(
        self, topics_changed: Callable[[], None]
    ) -> Callable[[BrokerConfig, set[str]], None]:
        """updateBrokerConfig: the keys that change live, handed to what reads them."""
        tables = self._tables

        def apply(config: BrokerConfig, keys: set[str]) -> None:
            self.send.apply_config(config)
            self.pull.apply_config(config)
            self.pop.apply_config(config)
            tables.groups.auto_create = config.auto_create_subscription_group
            if keys & {"autoCreateTopicEnable", "defaultTopicQueueNums", "brokerPermission"}:
                tables.topics.set_default_topic(
                    config.auto_create_topic_enable,
                    config.default_topic_queue_nums,
                    config.broker_permission,
                )
                topics_changed()  # the name servers learn of it now

        return apply

    def handlers(self) -> dict[type, Handler]:
        """Every request broker-remoting serves, with its handler. Writes are fenced by the
        write lease and guarded by the in-sync set (controller mode) before anything runs."""
        lease, isr = self._lease, self.isr

        def write(handler: Handler) -> Handler:
            return fenced(lease, isr.guard(handler))

        consumers, admin, queries, pop = self.consumers, self.admin, self.queries, self.pop
        settle = PopSettleProcessor(pop)
        table: dict[type, Handler] = {
            m.GrantWriteLeaseRequest: isr.with_grant(lease.grant_request),
            m.GetBrokerEpochRequest: broker_epoch(self._config),
            m.SendMessageRequest: write(self.send.handle),
            m.ConsumerSendMsgBackRequest: write(self.send_back.handle),
            m.EndTransactionRequest: write(self.end_transaction.handle),
            m.SendReplyRequest: self.replies.send_reply,
            m.PollRepliesRequest: self.replies.poll,
            m.PullMessageRequest: self.pull.handle,
            m.HeartbeatRequest: consumers.heartbeat,
            m.UnregisterClientRequest: consumers.unregister,
            m.GetConsumerListByGroupRequest: consumers.consumer_list,
            m.QueryConsumerOffsetRequest: consumers.query_offset,
            m.UpdateConsumerOffsetRequest: consumers.update_offset,
            m.GetMaxOffsetRequest: consumers.max_offset,
            m.GetMinOffsetRequest: consumers.min_offset,
            m.QueryTopicConsumeByWhoRequest: consumers.groups_of_topic,
            m.PopMessageRequest: pop.pop,
            m.AckMessageRequest: settle.ack,
            m.BatchAckMessageRequest: settle.batch_ack,
            m.ChangeInvisibleTimeRequest: settle.change,
            m.LockBatchRequest: self.locks.lock,
            m.UnlockBatchRequest: self.locks.unlock,
            m.SchedulerStatusRequest: self.scheduler_link.status,
            m.UpdateTopicRequest: admin.update_topic,
            m.GetAllTopicConfigRequest: admin.all_topic_configs,
            m.GetTopicStatsRequest: admin.topic_stats,
            m.GetBrokerRuntimeInfoRequest: admin.runtime_info,
            m.SearchOffsetByTimestampRequest: queries.search_offset,
            m.QueryConsumeQueueRequest: queries.query_cq,
            m.GetBrokerHaStatusRequest: queries.ha_status,
            m.ViewMessageRequest: queries.view_message,
            m.DeleteExpiredCommitLogRequest: queries.delete_expired,
            m.QueryMessageRequest: self.message_query.query_message,
            m.DeleteTopicRequest: self.meta.delete_topic,
            m.UpdateSubscriptionGroupRequest: self.meta.update_group,
            m.DeleteSubscriptionGroupRequest: self.meta.delete_group,
            m.GetAllSubscriptionGroupRequest: self.meta.all_groups,
            m.CleanExpiredConsumeQueueRequest: self.meta.clean_expired,
            m.GetConsumerConnectionListRequest: self.client_admin.consumer_connections,
            m.GetProducerConnectionListRequest: self.client_admin.producer_connections,
            m.ResetOffsetRequest: self.client_admin.reset_offset,
            m.GetBrokerStatsRequest: self.client_admin.broker_stats,
            m.GetBrokerConfigRequest: self.live_config.get,
            m.UpdateBrokerConfigRequest: self.live_config.update,
            m.SlaveSyncRequest: self.master_sync.handle,
        }
        table.update(self._tables.auth.handlers())
        return table

    def start(self) -> None:
        """The periodic work of the processors, on the service's loop."""
        service = self._service
        service.every(REPLY_SWEEP_S, self.replies.sweep)
        if self.slave_wait is not None and self._config.reads_gated:
            service.every(CONFIRM_REFRESH_S, self.slave_wait.refresh_confirm)
        if self.checkback is not None:
            clients = self._tables.clients
            TransactionCheckRelay(service, self.checkback, clients, self.notifier).start()
        stats = self._tables.stats
        stats.sample()  # statsAll's rates are over the samples taken since
        service.every(SAMPLE_INTERVAL_S, stats.sample)


def connect(service: Service, endpoint: str) -> Peer | None:
    return service.connect_peer(endpoint) if endpoint else None
