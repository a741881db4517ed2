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
    AnyReply,
    PingRequest,
    PongReply,
    RegisterBrokerRequest,
    StoreStatusReply,
    StoreStatusRequest,
    TopicConfig,
    UnregisterBrokerRequest,
)
from ferry.remoting.auth_admin import AuthAdmin
from ferry.remoting.auth_push import AuthPusher
from ferry.remoting.client_table import ClientTable
from ferry.remoting.consumer_offsets import ConsumerOffsetTable
from ferry.remoting.door import server as door
from ferry.remoting.held_queues import cover_held_queues
from ferry.remoting.processors import BrokerAddress, BrokerProcessors, BrokerTables
from ferry.remoting.registration import NamesrvRegistrar, parse_namesrv_addr, register_period_s
from ferry.remoting.stats import BrokerStats, now_ms
from ferry.remoting.subscription_groups import SubscriptionGroupTable
from ferry.remoting.topic_table import TopicTable
from ferry.remoting.write_lease import WriteLease
from ferry.runtime import epoch_file, metrics
from ferry.runtime.config import BrokerConfig
from ferry.runtime.security import settings
from ferry.runtime.service import Service, announce_ready
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
        self.rocketmq_addr = ""
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
        controllers = [a.strip() for a in config.controller_addr.split(";") if a.strip()]
        pusher = AuthPusher(
            self.service,
            self.auth_db,
            config.broker_name,
            config.broker_cluster_name,
            addrs + controllers,
            inner,
            is_master=lambda: config.broker_role != "SLAVE",
            kinds=["name server"] * len(addrs) + ["controller"] * len(controllers),
        )
        # an admin change is answered once the name servers and controllers have it
        self.auth.confirm = pusher.confirm

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
        self.rocketmq_addr = self._open_door()
        self._wire()
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

    def _wire(self) -> None:
        """The processors (processors.py), served on this service's port."""
        tables = BrokerTables(
            self.topics, self.groups, self.offsets, self.auth, self.clients, self.stats
        )
        address = BrokerAddress(
            self.addr, self.ha_addr, self.version, store_host=self.rocketmq_addr or self.addr
        )
        processors = BrokerProcessors(
            self.config,
            self.service,
            tables,
            self.store,
            address,
            self.write_lease,
            self._topics_changed,
        )
        for request_type, handler in processors.handlers().items():
            self.service.on(request_type, handler)
        processors.start()
        self.processors = processors
        if self.door is not None:
            door.serve(self.door, processors)

    def _open_door(self) -> str:
        """RocketMQ's remoting protocol in front of the same processors (door/), when
        rocketmqListenPort is set: its advertised host:port, or "". Opened before the
        processors are built: records are stored with the door's address as their store
        host, which RocketMQ clients send consumed messages back to."""
        config = self.config
        self.door = None
        if config.rocketmq_listen_port < 0:
            return ""
        self.door = door.open_door(self.service, config.listen_host, config.rocketmq_listen_port)
        return f"{config.advertised_host}:{self.door.tcp.port}"

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
        if self.rocketmq_addr:
            extra["rocketmq"] = self.rocketmq_addr
        announce_ready(SERVICE_NAME, addr=self.addr, **extra)
        self.registrar.start(register_period_s(self.config.register_name_server_period))
        slave_sync = self.processors.slave_sync
        if slave_sync is not None:
            slave_sync.start(self.config.slave_synchronize_interval / 1000)
        flush_s = max(self.config.flush_consumer_offset_interval, 100) / 1000
        self.service.every(flush_s, self._flush_offsets)
        self.service.every(CLIENT_SCAN_INTERVAL_S, self._expire_clients)

    # ---- background work ----

    def _topics_changed(self) -> None:
        self.registrar.register_soon()

    def _flush_offsets(self) -> None:
        self.offsets.persist_if_dirty()

    def _expire_clients(self) -> None:
        for client_id in self.processors.consumers.expire_clients(now_ms()):
            log.info(
                "client %s sent no heartbeat for %d s; dropped",
                client_id,
                self.clients.expire_ms // 1000,
            )

    def _start_metrics(self) -> str:
        """OTel instruments when metrics are on; the Prometheus endpoint's host:port if any
        (one that cannot bind is logged and left out: messages go on)."""
        self.broker_metrics: Any = None  # a BrokerMetrics while metrics are on
        if not metrics.enabled():
            return ""
        # imported here: it brings prometheus_client, which a process without metrics skips
        from ferry.remoting.broker_metrics import BrokerMetrics

        self.broker_metrics = BrokerMetrics(
            self.config, self.stats, self.offsets, f"tcp://{self.ha_addr}"
        )
        return str(self.broker_metrics.start())

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
            rocketmq_addr=self.rocketmq_addr,
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
