"""Composition root of the name server: config, route table, request handlers, expiry scan."""

from __future__ import annotations

import logging
import time

import msgspec

from ferry.namesrv import door
from ferry.namesrv.kv_store import KvStore, check_entry
from ferry.namesrv.live_config import LiveConfig
from ferry.namesrv.route_table import BrokerRef, RouteTable
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    AddWritePermRequest,
    ClusterInfoReply,
    DeleteKvConfigRequest,
    DeleteTopicInNamesrvRequest,
    GetAllTopicListRequest,
    GetClusterInfoRequest,
    GetKvConfigRequest,
    GetNamesrvConfigRequest,
    GetRouteInfoRequest,
    KvConfigReply,
    KvDeletedReply,
    OkReply,
    PutKvConfigRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    RouteInfoReply,
    TopicListReply,
    UnregisterBrokerRequest,
    UpdateNamesrvConfigRequest,
    WipeWritePermRequest,
    WritePermReply,
)
from ferry.protocol.names import check_topic
from ferry.runtime.config import NamesrvConfig
from ferry.runtime.remoting_door import RemotingDoor
from ferry.runtime.service import Call, Service, announce_ready, dial_address
from ferry.runtime.version import package_version

log = logging.getLogger("ferry.namesrv")

SERVICE_NAME = "namesrv"

MAX_PORT = 65535
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # the kv namespace updateOrderConf writes


def now_ms() -> int:
    # Monotonic: a wall-clock jump must not expire every broker at once.
    return int(time.monotonic() * 1000)


def check_name(what: str, value: str) -> None:
    if not value.strip():
        raise InvalidParameterError(f"{what} is empty")


def check_addr(what: str, addr: str) -> None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise InvalidParameterError(f"{what} {addr!r} is not host:port")


def check_register(req: RegisterBrokerRequest) -> None:
    check_name("cluster", req.cluster)
    check_name("broker_name", req.broker_name)
    if req.broker_id < 0:
        raise InvalidParameterError(f"broker_id {req.broker_id} is negative")
    check_addr("broker_addr", req.broker_addr)
    if req.ha_addr:
        check_addr("ha_addr", req.ha_addr)
    if req.rocketmq_addr:
        check_addr("rocketmq_addr", req.rocketmq_addr)
    if req.timeout_ms <= 0:
        raise InvalidParameterError(f"timeout_ms {req.timeout_ms} is not positive")
    if req.epoch < 0:
        raise InvalidParameterError(f"epoch {req.epoch} is negative")
    for name, config in req.topics.items():
        check_topic(name)
        if config.topic_name != name:
            raise InvalidParameterError(f"topic key {name!r} names config {config.topic_name!r}")
        if config.read_queue_nums < 0 or config.write_queue_nums < 0:
            raise InvalidParameterError(f"topic {name!r} has a negative queue count")


class NamesrvApp:
    """Binds the ROUTER and wires the handlers; run() serves until SIGTERM/SIGINT."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.table = RouteTable()
        self.kv = KvStore(config.kv_config_path)
        self.live = LiveConfig(config, self._config_changed)
        self._scan_generation = 0
        self.service = Service(SERVICE_NAME, version=package_version("ferry-namesrv"))
        endpoint = self.service.bind_router(f"tcp://{config.listen_host}:{config.listen_port}")
        self.addr = dial_address(endpoint)
        self.service.on(RegisterBrokerRequest, self._register)
        self.service.on(UnregisterBrokerRequest, self._unregister)
        self.service.on(GetRouteInfoRequest, self._route)
        self.service.on(GetClusterInfoRequest, self._cluster_info)
        self.service.on(GetAllTopicListRequest, self._topic_list)
        self.service.on(DeleteTopicInNamesrvRequest, self._delete_topic)
        self.service.on(WipeWritePermRequest, self._wipe_write_perm)
        self.service.on(AddWritePermRequest, self._add_write_perm)
        self.service.on(GetNamesrvConfigRequest, self.live.get)
        self.service.on(UpdateNamesrvConfigRequest, self.live.update)
        self.service.on(PutKvConfigRequest, self._put_kv)
        self.service.on(GetKvConfigRequest, self._get_kv)
        self.service.on(DeleteKvConfigRequest, self._delete_kv)
        self.door: RemotingDoor | None = None
        if config.rocketmq_listen_port >= 0:
            self.door = RemotingDoor(
                self.service, config.listen_host, config.rocketmq_listen_port, door.routes()
            )
        self._arm_scan()

    def run(self) -> None:
        extra = {"rocketmq": self.door.address} if self.door is not None else {}
        announce_ready(SERVICE_NAME, addr=self.addr, **extra)
        log.info("namesrv serving on %s", self.addr)
        self.service.run()

    # ---- handlers ----

    def _register(self, req: RegisterBrokerRequest, _call: Call) -> RegisterBrokerReply:
        check_register(req)
        result = self.table.register(
            cluster=req.cluster,
            broker_name=req.broker_name,
            broker_id=req.broker_id,
            broker_addr=req.broker_addr,
            ha_addr=req.ha_addr,
            rocketmq_addr=req.rocketmq_addr,
            topics=req.topics,
            timeout_ms=req.timeout_ms,
            now_ms=now_ms(),
            epoch=req.epoch,
        )
        if result.first:
            log.info(
                "broker registered: %s id %d at %s, cluster %s, %d topics",
                req.broker_name,
                req.broker_id,
                req.broker_addr,
                req.cluster,
                len(req.topics),
            )
        return result.reply

    def _unregister(self, req: UnregisterBrokerRequest, _call: Call) -> OkReply:
        removed = self.table.unregister(
            broker_name=req.broker_name,
            broker_id=req.broker_id,
            broker_addr=req.broker_addr,
            epoch=req.epoch,
        )
        if removed is not None:
            self._log_removed(removed, "unregistered")
        return OkReply()

    def _route(self, req: GetRouteInfoRequest, _call: Call) -> RouteInfoReply:
        check_topic(req.topic)
        route = self.table.route(req.topic)
        order = self.kv.get(ORDER_TOPIC_CONFIG, req.topic)
        if order is not None:
            route = msgspec.structs.replace(route, order_topic_conf=order)
        return RouteInfoReply(route)

    def _cluster_info(self, _req: GetClusterInfoRequest, _call: Call) -> ClusterInfoReply:
        return self.table.cluster_info()

    def _topic_list(self, _req: GetAllTopicListRequest, _call: Call) -> TopicListReply:
        return TopicListReply(self.table.topic_names())

    # ---- admin (mqadmin deleteTopic, wipeWritePerm, addWritePerm) ----

    def _delete_topic(self, req: DeleteTopicInNamesrvRequest, _call: Call) -> OkReply:
        check_topic(req.topic)
        if self.table.delete_topic(req.topic, req.cluster):
            log.info("topic %s deleted%s", req.topic, f" in {req.cluster}" if req.cluster else "")
        return OkReply()

    def _wipe_write_perm(self, req: WipeWritePermRequest, _call: Call) -> WritePermReply:
        check_name("broker_name", req.broker_name)
        topics = self.table.set_write_perm(req.broker_name, writable=False)
        log.info("write permission of %s wiped (%d topics)", req.broker_name, topics)
        return WritePermReply(topics=topics)

    def _add_write_perm(self, req: AddWritePermRequest, _call: Call) -> WritePermReply:
        check_name("broker_name", req.broker_name)
        topics = self.table.set_write_perm(req.broker_name, writable=True)
        log.info("write permission of %s restored (%d topics)", req.broker_name, topics)
        return WritePermReply(topics=topics)

    # ---- kv store and config (mqadmin updateKvConfig, deleteKvConfig, updateNamesrvConfig) ----

    def _put_kv(self, req: PutKvConfigRequest, _call: Call) -> OkReply:
        self.kv.put(req.namespace, req.key, req.value)
        return OkReply()

    def _get_kv(self, req: GetKvConfigRequest, _call: Call) -> KvConfigReply:
        check_entry(req.namespace, req.key)
        value = self.kv.get(req.namespace, req.key)
        return KvConfigReply(found=value is not None, value=value or "")

    def _delete_kv(self, req: DeleteKvConfigRequest, _call: Call) -> KvDeletedReply:
        return KvDeletedReply(existed=self.kv.delete(req.namespace, req.key))

    def _config_changed(self, keys: set[str]) -> None:
        if "scanNotActiveBrokerInterval" in keys:
            self._arm_scan()  # the old chain of scans stops at its next turn

    # ---- background ----

    def _arm_scan(self) -> None:
        self._scan_generation += 1
        generation = self._scan_generation

        def turn() -> None:
            if generation != self._scan_generation:
                return
            self._scan()
            self.service.later(self.config.scan_not_active_broker_interval / 1000, turn)

        self.service.later(self.config.scan_not_active_broker_interval / 1000, turn)

    def _scan(self) -> None:
        for removed in self.table.expire(now_ms()):
            self._log_removed(removed, "expired (no registration within its timeout)")

    @staticmethod
    def _log_removed(ref: BrokerRef, why: str) -> None:
        log.info(
            "broker %s: %s id %d at %s, cluster %s",
            why,
            ref.broker_name,
            ref.broker_id,
            ref.addr,
            ref.cluster,
        )
