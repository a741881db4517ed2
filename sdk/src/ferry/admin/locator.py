"""BrokerLocator: what every admin operation stands on. It owns the started ClientInstance
and answers where a request goes (the name servers' clusters and routes, a queue's master,
the brokers a command targets) and sends it, every failure naming the broker or name server
that failed (`at`), so that an operator knows where to look.

Admin is a BrokerLocator with the operations on top; the operation modules (topics, offsets,
groups, ...) take a BrokerLocator and call only these public methods, so none of them needs
Admin and Admin needs none of their internals.
"""

from __future__ import annotations

from typing import TypeVar

from ferry.admin.options import AdminOptions
from ferry.client.instance import ClientInstance, not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.message import MessageQueue
from ferry.client.transport import expect
from ferry.protocol.errors import BrokerNotExistError, FerryError, InvalidParameterError
from ferry.protocol.messages import (
    AnyRequest,
    ClusterInfoReply,
    GetAllTopicListRequest,
    GetClusterInfoRequest,
    GetRouteInfoRequest,
    Reply,
    RouteInfoReply,
    TopicListReply,
    TopicRouteData,
)

MASTER_ID = 0
R = TypeVar("R", bound=Reply)


def at(err: FerryError, where: str) -> FerryError:
    """The same error, its message saying where it happened, and the address said once."""
    if err.message.startswith(where):
        return err
    address = where.rpartition(" ")[2]
    if err.message == f"connection refused: nothing answers at {address}":
        message = f"{where}: connection refused, nothing answers there (is it running?)"
        return type(err)(message, retriable=err.retriable, code=err.code)
    return type(err)(f"{where}: {err.message}", retriable=err.retriable, code=err.code)


def broker_names(info: ClusterInfoReply, cluster: str | None) -> list[str]:
    """The broker names of one cluster, or of all; an unknown cluster is refused."""
    if cluster is not None and cluster not in info.clusters:
        raise InvalidParameterError(f"cluster {cluster!r} is unknown to the name server")
    return list(info.clusters[cluster]) if cluster is not None else list(info.brokers)


class BrokerLocator(AdminOptions, Lifecycle):
    """Options: see AdminOptions. Every call but start() and shutdown() needs it started."""

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

    def instance(self) -> ClientInstance:
        """The started ClientInstance (its connections, routes and API timeout);
        IllegalStateError before start()."""
        if self._instance is None:
            raise not_started("admin")
        return self._instance

    # ---- sending ----

    def broker_request(self, addr: str, body: AnyRequest, cls: type[R]) -> R:
        """The reply of the broker at `addr`, of type cls; its errors name the broker."""
        inst = self.instance()
        try:
            return expect(inst.connection(addr).request(body, timeout_s=inst.api_timeout_s), cls)
        except FerryError as err:
            raise at(err, f"broker {addr}") from None

    def namesrv_request(self, body: AnyRequest, cls: type[R]) -> R:
        """Any name server's reply; its errors name the name servers asked."""
        try:
            return self.instance().routes.namesrv_request(body, cls)
        except FerryError as err:
            raise at(err, f"name server {self.namesrv}") from None

    def each_namesrv(self, body: AnyRequest, cls: type[R]) -> dict[str, R]:
        """Sends to every name server (they are independent, as RocketMQ's): address ->
        reply. The first failure is raised, naming its name server."""
        inst = self.instance()
        out: dict[str, R] = {}
        for addr in inst.routes.namesrv_addrs:
            try:
                result = inst.connection(addr).request(body, timeout_s=inst.api_timeout_s)
                out[addr] = expect(result, cls)
            except FerryError as err:
                raise at(err, f"name server {addr}") from None
        return out

    def each_target(
        self, body: AnyRequest, cls: type[R], cluster: str | None, broker_addr: str | None
    ) -> dict[str, R]:
        """Sends to each broker of targets(cluster, broker_addr): address -> reply."""
        return {
            addr: self.broker_request(addr, body, cls)
            for addr in self.targets(cluster, broker_addr)
        }

    # ---- what the name servers know ----

    def topic_list(self) -> list[str]:
        return list(self.namesrv_request(GetAllTopicListRequest(), TopicListReply).topics)

    def topic_route(self, topic: str) -> TopicRouteData:
        """TopicNotExistError when no broker serves the topic."""
        return self.namesrv_request(GetRouteInfoRequest(topic=topic), RouteInfoReply).route

    def cluster_info(self) -> ClusterInfoReply:
        return self.namesrv_request(GetClusterInfoRequest(), ClusterInfoReply)

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, of one cluster or of all."""
        info = self.cluster_info()
        out: dict[str, str] = {}
        for name in sorted(broker_names(info, cluster)):
            data = info.brokers.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out[name] = data.broker_addrs[MASTER_ID]
        return out

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

    def targets(self, cluster: str | None, broker_addr: str | None) -> list[str]:
        """One broker (-b), or the masters of a cluster (-c), or of every cluster."""
        if broker_addr:
            return [broker_addr]
        addrs = sorted(set(self.master_addrs(cluster).values()))
        if not addrs:
            raise BrokerNotExistError(f"no broker master in {cluster or 'any cluster'}")
        return addrs

    def replica_addrs(self, cluster: str | None) -> list[str]:
        """Every broker of a cluster (or of all), masters and slaves."""
        info = self.cluster_info()
        names = broker_names(info, cluster)
        addrs = sorted(
            {a for n in names if (data := info.brokers.get(n)) for a in data.broker_addrs.values()}
        )
        if not addrs:
            raise BrokerNotExistError(f"no broker in {cluster or 'any cluster'}")
        return addrs

    # ---- routes ----

    def queues(self, topic: str) -> list[MessageQueue]:
        """The read queues of `topic`, sorted."""
        return list(self.instance().routes.fetch(topic).read_queues)

    def queue_addr(self, queue: MessageQueue) -> str:
        """The master address of the broker holding `queue` (its topic's route looked up)."""
        routes = self.instance().routes
        routes.get(queue.topic)
        addr = routes.addr_of(queue.broker_name)
        if addr is None:
            raise BrokerNotExistError(f"no master address for broker {queue.broker_name}")
        return addr

    def invalidate(self, topic: str) -> None:
        """Forgets the cached route of `topic`, after a change to it."""
        self.instance().routes.invalidate(topic)
