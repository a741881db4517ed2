"""Composition root of broker-remoting: state tables, handlers, store and name server links.

Start-up order: load the state files, bind the client socket, wait for the store to answer a
ping, then print READY and register with the name servers. A broker whose store does not
answer is of no use to anyone, so it exits non-zero instead of announcing itself.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import msgspec
import zmq

from ferry.protocol.codes import Perm
from ferry.protocol.errors import ConfigError
from ferry.protocol.messages import (
    AckMessageRequest,
    AnyReply,
    BatchAckMessageRequest,
    ChangeInvisibleTimeRequest,
    CleanExpiredConsumeQueueRequest,
    ConsumerSendMsgBackRequest,
    DeleteExpiredCommitLogRequest,
    DeleteSubscriptionGroupRequest,
    DeleteTopicRequest,
    EndTransactionRequest,
    GetAllSubscriptionGroupRequest,
    GetAllTopicConfigRequest,
    GetBrokerConfigRequest,
    GetBrokerEpochRequest,
    GetBrokerHaStatusRequest,
    GetBrokerRuntimeInfoRequest,
    GetBrokerStatsRequest,
    GetConsumerConnectionListRequest,
    GetConsumerListByGroupRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    GetProducerConnectionListRequest,
    GetTopicStatsRequest,
    GrantWriteLeaseRequest,
    HeartbeatRequest,
    LockBatchRequest,
    PingRequest,
    PollRepliesRequest,
    PongReply,
    PopMessageRequest,
    PullMessageRequest,
    QueryConsumeQueueRequest,
    QueryConsumerOffsetRequest,
    QueryMessageRequest,
    QueryTopicConsumeByWhoRequest,
    RegisterBrokerRequest,
    ResetOffsetRequest,
    SchedulerStatusRequest,
    SearchOffsetByTimestampRequest,
    SendMessageRequest,
    SendReplyRequest,
    SlaveSyncRequest,
    StoreStatusReply,
    StoreStatusRequest,
    TopicConfig,
    UnlockBatchRequest,
    UnregisterBrokerRequest,
    UnregisterClientRequest,
    UpdateBrokerConfigRequest,
    UpdateConsumerOffsetRequest,
    UpdateSubscriptionGroupRequest,
    UpdateTopicRequest,
    ViewMessageRequest,
)
from ferry.remoting.admin import AdminProcessor, BrokerIdentity
from ferry.remoting.admin_clients import ClientAdmin
from ferry.remoting.admin_meta import MetadataAdmin
from ferry.remoting.auth_admin import AuthAdmin
from ferry.remoting.auth_push import AuthPusher
from ferry.remoting.broker_epoch import broker_epoch
from ferry.remoting.broker_metrics import BrokerMetrics
from ferry.remoting.check_relay import TransactionCheckRelay
from ferry.remoting.client_table import ClientTable
from ferry.remoting.consumer_manage import ConsumerManager, GroupCoordination
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.end_transaction import EndTransactionProcessor
from ferry.remoting.group_topics import GroupTopics
from ferry.remoting.ha_wait import CONFIRM_REFRESH_S, SlaveAckWait
from ferry.remoting.held_queues import cover_held_queues
from ferry.remoting.in_sync_replicas import InSyncReplicas
from ferry.remoting.live_config import LiveConfig
from ferry.remoting.member_notices import MemberNotifier
from ferry.remoting.message_query import MessageQueryProcessor
from ferry.remoting.pop import PopProcessor, PopSettleProcessor
from ferry.remoting.pull import PullProcessor
from ferry.remoting.queue_locks import QueueLockProcessor, QueueLockTable
from ferry.remoting.registration import NamesrvRegistrar, parse_namesrv_addr, register_period_s
from ferry.remoting.reply import SWEEP_INTERVAL_S as REPLY_SWEEP_S
from ferry.remoting.reply import ReplyProcessor
from ferry.remoting.scheduler_link import SchedulerLink
from ferry.remoting.send import SendProcessor
from ferry.remoting.send_back import SendBackProcessor
from ferry.remoting.slave_sync import MasterSyncProcessor, SlaveSynchronizer
from ferry.remoting.stats import SAMPLE_INTERVAL_S, BrokerStats, now_ms
from ferry.remoting.store_queries import StoreQueryProcessor
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.remoting.write_lease import WriteLease, fenced
from ferry.runtime import epoch_file, metrics
from ferry.runtime.config import BrokerConfig
from ferry.runtime.confirm_relay import ConfirmRelay
from ferry.runtime.security import settings
from ferry.runtime.service import Peer, Service, announce_ready
from ferry.runtime.version import package_version

log = logging.getLogger("ferry.remoting")

SERVICE_NAME = "broker-remoting"
STORE_READY_TIMEOUT_S = 20.0
STORE_PING_TIMEOUT_S = 2.0
STORE_PING_RETRY_S = 0.5
CLIENT_SCAN_INTERVAL_S = 10.0


def masked_topics(topics: dict[str, TopicConfig], broker_perm: int) -> dict[str, TopicConfig]:
    """What the name servers are told: a read-only broker (brokerPermission 4) offers no
    topic for writing, whatever the topic's own perm."""
    keep = broker_perm | Perm.INHERIT
    return {
        name: c if c.perm & keep == c.perm else msgspec.structs.replace(c, perm=c.perm & keep)
        for name, c in topics.items()
    }


class RemotingApp:
    def __init__(self, config: BrokerConfig) -> None:
        if not config.store_endpoint:
            raise ConfigError(
                "storeEndpoint is empty: set it to the endpoint of this broker's broker-store "
                "(e.g. --set storeEndpoint=tcp://127.0.0.1:10915)"
            )
        self.config = config
        self.namesrv_addrs = parse_namesrv_addr(config.namesrv_addr)
        config_dir = config.store_root / "config"
        self.topics = TopicTable(config_dir)
        self.topics.load()
        self.topics.set_default_topic(
            config.auto_create_topic_enable,
            config.default_topic_queue_nums,
            config.broker_permission,
        )
        self.groups = SubscriptionGroupTable(
            config_dir, auto_create=config.auto_create_subscription_group
        )
        self.groups.load()
        self.offsets = ConsumerOffsetTable(config_dir)
        self.offsets.load()
        # users and ACLs (config/auth.json); auth_db is what the request guard asks
        self.auth = AuthAdmin(config_dir, config.broker_name, slave=config.broker_role == "SLAVE")
        self.auth.ensure_init_user(config.init_user())
        self.auth_db = self.auth.db
        self.clients = ClientTable()
        self.stats = BrokerStats()
        self.version = package_version("ferry-broker-remoting")
        self.service = Service(
            SERVICE_NAME, max_deferred=config.max_pending_requests, version=self.version
        )
        self.addr = ""
        self.exit_code = 0
        self._ready = False
        self._store_deadline = 0.0

    def _secure(self) -> None:
        """With authentication on: the guard checks users against this broker's, and a master
        pushes them to the name servers and controllers, which check against them too."""
        guard = self.service.guard
        inner = settings.inner_credentials()
        if guard is None or inner is None:
            return
        guard.users = self.auth_db
        config = self.config
        addrs = list(self.namesrv_addrs)
        addrs += [a.strip() for a in config.controller_addr.split(";") if a.strip()]
        AuthPusher(
            self.service,
            self.auth_db,
            config.broker_name,
            config.broker_cluster_name,
            addrs,
            inner,
            is_master=lambda: config.broker_role != "SLAVE",
        )

    def run(self) -> int:
        """Serves until stopped; returns the process exit code."""
        config = self.config
        try:
            bound = self.service.bind_router(f"tcp://{config.listen_host}:{config.listen_port}")
        except zmq.ZMQError as exc:
            print(
                f"{SERVICE_NAME}: cannot listen on {config.listen_host}:{config.listen_port}: "
                f"{exc}",
                file=sys.stderr,
            )
            self.service.ctx.destroy(linger=0)
            return 1
        port = int(bound.rpartition(":")[2])
        self.addr = f"{config.advertised_host}:{port}"
        ha_port = config.ha_listen_port or port + 1
        self.ha_addr = f"{config.advertised_host}:{ha_port}"
        self.store = self.service.connect_peer(config.store_endpoint)
        self._secure()
        # controller mode: writes are acknowledged, and this master named to the name
        # servers, only under the agent's lease (write_lease.py)
        self.write_lease = WriteLease(
            config.broker_name,
            config.enable_controller_mode and config.broker_role != "SLAVE",
            on_granted=self._lease_granted,
        )
        self.registrar = NamesrvRegistrar(
            self.service,
            self.namesrv_addrs,
            self._registration,
            self._unregistration,
            may_register=lambda: not self.write_lease.lapsed(),
        )
        self._wire(self.store)
        self.metrics_addr = self._start_metrics()
        self.service.on_stop(self._on_stop)
        log.info(
            "%s %s: clients on %s, store at %s, name servers %s",
            SERVICE_NAME,
            config.broker_name,
            bound,
            config.store_endpoint,
            ";".join(self.namesrv_addrs) or "(none)",
        )
        self._store_deadline = time.monotonic() + STORE_READY_TIMEOUT_S
        self._ping_store()
        self.service.run()
        return self.exit_code

    def _wire(self, store: Peer) -> None:
        config = self.config
        service = self.service
        topics_changed = self._topics_changed
        send = SendProcessor(config, self.topics, store, self.stats, self.addr, topics_changed)
        replies = ReplyProcessor(config, self.topics, store, self.addr)  # request/reply
        send.stamp_request = replies.stamp
        service.on(SendReplyRequest, replies.send_reply)
        service.on(PollRepliesRequest, replies.poll)
        service.every(REPLY_SWEEP_S, replies.sweep)
        pull = PullProcessor(config, self.topics, self.groups, self.offsets, store, self.stats)
        # a killed store never answers what it held: its long polls are answered empty (the
        # consumer pulls again) and its puts failed as retriable (the producer sends again)

        def store_lost() -> None:
            pull.store_lost()
            send.store_lost()

        store.watch(zmq.EVENT_DISCONNECTED, store_lost)
        group_topics = GroupTopics(self.topics, topics_changed)
        locks = QueueLockTable()
        notifier = MemberNotifier(service)
        coordination = GroupCoordination(notifier, locks, group_topics)
        consumers = ConsumerManager(
            self.clients,
            self.groups,
            self.offsets,
            store,
            coordination,
            check_subscription=pull.check_subscription,
        )
        self.consumers = consumers
        identity = BrokerIdentity(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.registered_broker_id,
            role=config.broker_role,
            addr=self.addr,
            version=self.version,
        )
        # transactions: checks come from the check-back service, which also knows earlier ends
        tx_peer = (
            service.connect_peer(config.checkback_endpoint) if config.checkback_endpoint else None
        )
        scheduler = (
            service.connect_peer(config.scheduler_endpoint) if config.scheduler_endpoint else None
        )
        scheduler_link = SchedulerLink(scheduler, tx_peer)
        service.on(SchedulerStatusRequest, scheduler_link.status)
        self.scheduler_link = scheduler_link
        admin = AdminProcessor(
            config,
            identity,
            self.topics,
            self.groups,
            self.clients,
            store,
            service,
            self.stats,
            topics_changed,
            scheduler_link,
        )
        lease = self.write_lease
        # controller mode, SYNC_MASTER: minInSyncReplicas and allAckInSyncStateSet
        isr = InSyncReplicas(config)
        self.in_sync_replicas = isr
        service.on(GrantWriteLeaseRequest, isr.with_grant(lease.grant_request))
        service.on(GetBrokerEpochRequest, broker_epoch(config))
        service.on(SendMessageRequest, fenced(lease, isr.guard(send.handle)))
        self._wire_ha(send, isr)
        send.after_store = lease.gate(send.after_store)
        service.on(PullMessageRequest, pull.handle)
        service.on(HeartbeatRequest, consumers.heartbeat)
        service.on(UnregisterClientRequest, consumers.unregister)
        service.on(GetConsumerListByGroupRequest, consumers.consumer_list)
        service.on(QueryConsumerOffsetRequest, consumers.query_offset)
        service.on(UpdateConsumerOffsetRequest, consumers.update_offset)
        service.on(GetMaxOffsetRequest, consumers.max_offset)
        service.on(GetMinOffsetRequest, consumers.min_offset)
        service.on(QueryTopicConsumeByWhoRequest, consumers.groups_of_topic)
        send_back = SendBackProcessor(
            self.groups,
            group_topics,
            store,
            self.addr,
            self.stats,
            max_level=len(config.delay_levels_ms),
            hold=bool(config.scheduler_endpoint),
        )
        service.on(ConsumerSendMsgBackRequest, fenced(lease, isr.guard(send_back.handle)))
        self._wire_pop(group_topics, store, scheduler)
        send.on_stored = self.pop.messages_arrived
        lock_processor = QueueLockProcessor(locks)
        service.on(LockBatchRequest, lock_processor.lock)
        service.on(UnlockBatchRequest, lock_processor.unlock)
        service.on(UpdateTopicRequest, admin.update_topic)
        service.on(GetAllTopicConfigRequest, admin.all_topic_configs)
        service.on(GetTopicStatsRequest, admin.topic_stats)
        service.on(GetBrokerRuntimeInfoRequest, admin.runtime_info)
        ha = service.connect_peer(config.ha_endpoint or f"tcp://{self.ha_addr}")
        queries = StoreQueryProcessor(self.topics, store, ha)
        service.on(SearchOffsetByTimestampRequest, queries.search_offset)
        service.on(QueryConsumeQueueRequest, queries.query_cq)
        service.on(GetBrokerHaStatusRequest, queries.ha_status)
        service.on(ViewMessageRequest, queries.view_message)
        service.on(DeleteExpiredCommitLogRequest, queries.delete_expired)
        index = service.connect_peer(config.index_endpoint) if config.index_endpoint else None
        service.on(QueryMessageRequest, MessageQueryProcessor(store, index).query_message)
        timeout_ms = config.transaction_time_out
        end_transaction = EndTransactionProcessor(
            store, self.addr, self.stats, tx_peer, transaction_timeout_ms=timeout_ms
        )
        service.on(EndTransactionRequest, fenced(lease, isr.guard(end_transaction.handle)))
        if tx_peer is not None:
            TransactionCheckRelay(service, tx_peer, self.clients, notifier).start()
        self._wire_admin(store, send, pull, notifier)

    def _wire_pop(self, group_topics: GroupTopics, store: Peer, scheduler: Peer | None) -> None:
        """Pop consumption: pops here, checkpoints and acks kept by the scheduler's revive
        service (remoting/pop.py)."""
        config = self.config
        pop = PopProcessor(
            config.broker_name,
            self.topics,
            self.groups,
            self.offsets,
            group_topics,
            store,
            scheduler,
            self.service,
            self.stats,
        )
        pop.apply_config(config)
        self.pop = pop
        settle = PopSettleProcessor(pop)
        self.service.on(PopMessageRequest, pop.pop)
        self.service.on(AckMessageRequest, settle.ack)
        self.service.on(BatchAckMessageRequest, settle.batch_ack)
        self.service.on(ChangeInvisibleTimeRequest, settle.change)

    def _wire_admin(
        self, store: Peer, send: SendProcessor, pull: PullProcessor, notifier: MemberNotifier
    ) -> None:
        """mqadmin's requests beyond AdminProcessor's: deleteTopic, sub groups, connections,
        resetOffsetByTime, statsAll, cleanExpiredCQ, get/updateBrokerConfig."""
        service = self.service
        meta = MetadataAdmin(store, self.topics, self.groups, self.offsets, self._topics_changed)
        service.on(DeleteTopicRequest, meta.delete_topic)
        service.on(UpdateSubscriptionGroupRequest, meta.update_group)
        service.on(DeleteSubscriptionGroupRequest, meta.delete_group)
        service.on(GetAllSubscriptionGroupRequest, meta.all_groups)
        service.on(CleanExpiredConsumeQueueRequest, meta.clean_expired)
        self.auth.wire(service)
        clients = ClientAdmin(
            self.clients, self.groups, self.offsets, notifier, self.stats, self.config.broker_name
        )
        service.on(GetConsumerConnectionListRequest, clients.consumer_connections)
        service.on(GetProducerConnectionListRequest, clients.producer_connections)
        service.on(ResetOffsetRequest, clients.reset_offset)
        service.on(GetBrokerStatsRequest, clients.broker_stats)
        self.stats.sample()  # statsAll's rates are over the samples taken since
        service.every(SAMPLE_INTERVAL_S, self.stats.sample)

        def apply(config: BrokerConfig, keys: set[str]) -> None:
            send.apply_config(config)
            pull.apply_config(config)
            self.pop.apply_config(config)
            self.groups.auto_create = config.auto_create_subscription_group
            if keys & {"autoCreateTopicEnable", "defaultTopicQueueNums", "brokerPermission"}:
                self.topics.set_default_topic(
                    config.auto_create_topic_enable,
                    config.default_topic_queue_nums,
                    config.broker_permission,
                )
                self._topics_changed()  # the name servers learn of it now

        live = LiveConfig(self.config, store, apply)
        service.on(GetBrokerConfigRequest, live.get)
        service.on(UpdateBrokerConfigRequest, live.update)

    def _wire_ha(self, send: SendProcessor, isr: InSyncReplicas) -> None:
        """SYNC_MASTER sends wait for a slave's ack; slaves copy their master's metadata."""
        config = self.config
        self.slave_sync: SlaveSynchronizer | None = None
        if config.broker_role == "SYNC_MASTER":
            ha = self.service.connect_peer(config.ha_endpoint or f"tcp://{self.ha_addr}")
            # controller mode: the store's readers see only what the whole in-sync set holds
            confirm = ConfirmRelay(self.store) if config.reads_gated else None
            wait = SlaveAckWait(ha, config.sync_flush_timeout, isr, confirm)
            send.after_store = wait.reply
            if confirm is not None:
                self.service.every(CONFIRM_REFRESH_S, wait.refresh_confirm)
        sync = MasterSyncProcessor(self.topics, self.groups, self.offsets, self.scheduler_link)
        self.service.on(SlaveSyncRequest, sync.handle)
        if config.broker_role == "SLAVE":
            self.slave_sync = SlaveSynchronizer(
                self.service,
                config.broker_name,
                self.namesrv_addrs,
                self.topics,
                self.groups,
                self.offsets,
                self.scheduler_link,
                master_endpoint=config.master_endpoint,
                auth=self.auth,
            )

    # ---- start-up ----

    def _ping_store(self) -> None:
        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if self._ready:
                return
            if isinstance(body, PongReply):
                self._on_store_ready(body)
            elif time.monotonic() >= self._store_deadline:
                print(
                    f"{SERVICE_NAME}: the store at {self.config.store_endpoint} did not answer "
                    f"within {STORE_READY_TIMEOUT_S:.0f} s; is broker-store running there?",
                    file=sys.stderr,
                )
                self.exit_code = 1
                self.service.stop()
            else:
                self.service.later(STORE_PING_RETRY_S, self._ping_store)

        self.store.request(PingRequest(), on_reply, timeout_s=STORE_PING_TIMEOUT_S)

    def _on_store_ready(self, pong: PongReply) -> None:
        self._ready = True
        log.info(
            "store at %s answers (%s %s)", self.config.store_endpoint, pong.service, pong.version
        )
        if self.config.enable_controller_mode and self.config.broker_role != "SLAVE":
            self._store_deadline = time.monotonic() + STORE_READY_TIMEOUT_S
            self._cover_held_queues()  # a new master: announced once its topics cover its log
        else:
            self._announce()

    def _cover_held_queues(self) -> None:
        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, StoreStatusReply):
                cover_held_queues(self.topics, body.held_queues)
            elif time.monotonic() < self._store_deadline:
                self.service.later(STORE_PING_RETRY_S, self._cover_held_queues)
                return
            else:  # serving beats refusing; the topics it lacks are in the log
                log.error("the store did not list its queues (%s): topics not checked", body)
            self._announce()

        request = StoreStatusRequest(held_queues=True)
        self.store.request(request, on_reply, timeout_s=STORE_PING_TIMEOUT_S)

    def _announce(self) -> None:
        extra = {"metrics": self.metrics_addr} if self.metrics_addr else {}
        announce_ready(SERVICE_NAME, addr=self.addr, **extra)
        self.registrar.start(register_period_s(self.config.register_name_server_period))
        if self.slave_sync is not None:
            self.slave_sync.start(self.config.slave_synchronize_interval / 1000)
        flush_s = max(self.config.flush_consumer_offset_interval, 100) / 1000
        self.service.every(flush_s, self._flush_offsets)
        self.service.every(CLIENT_SCAN_INTERVAL_S, self._expire_clients)

    # ---- background work ----

    def _topics_changed(self) -> None:
        self.registrar.register_soon()

    def _flush_offsets(self) -> None:
        self.offsets.persist_if_dirty()

    def _expire_clients(self) -> None:
        for client_id in self.consumers.expire_clients(now_ms()):
            log.info(
                "client %s sent no heartbeat for %d s; dropped",
                client_id,
                self.clients.expire_ms // 1000,
            )

    def _start_metrics(self) -> str:
        """OTel instruments when metrics are on; the Prometheus endpoint's host:port if any
        (one that cannot bind is logged and left out: messages go on)."""
        self.broker_metrics: BrokerMetrics | None = None
        if not metrics.enabled():
            return ""
        self.broker_metrics = BrokerMetrics(
            self.config, self.stats, self.offsets, f"tcp://{self.ha_addr}"
        )
        return self.broker_metrics.start()

    def _on_stop(self) -> None:
        if self.broker_metrics is not None:
            self.broker_metrics.close()
        try:
            self.offsets.persist_if_dirty()
        except OSError:
            log.exception("consumer offsets not saved on stop")
        if self._ready:
            self.registrar.unregister_all()

    def _lease_granted(self) -> None:
        """A master's lease after a lapse (or its first): the name servers learn of it now."""
        self.registrar.register_soon()

    def _epoch(self) -> int:
        """The epoch this broker speaks for: its lease's as master, else its epoch file's
        (controller mode); the name servers keep the master of the highest one."""
        if self.write_lease.epoch:
            return self.write_lease.epoch
        if not self.config.enable_controller_mode:
            return 0
        epochs = epoch_file.load(self.config.store_root)
        return epochs[-1][0] if epochs else 0

    def _registration(self) -> RegisterBrokerRequest:
        config = self.config
        return RegisterBrokerRequest(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.registered_broker_id,
            broker_addr=self.addr,
            ha_addr=self.ha_addr,
            topics=masked_topics(self.topics.snapshot(), config.broker_permission),
            timeout_ms=config.broker_not_active_timeout_millis,
            epoch=self._epoch(),
        )

    def _unregistration(self) -> UnregisterBrokerRequest:
        config = self.config
        return UnregisterBrokerRequest(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.registered_broker_id,
            broker_addr=self.addr,
            epoch=self._epoch(),
        )
