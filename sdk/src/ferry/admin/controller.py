"""ControllerAdmin: mqadmin's controller commands (getSyncStateSet, getControllerMetaData,
electMaster, cleanBrokerMetadata) against `controllerAddr` (host:port[;host:port]).

with ControllerAdmin("127.0.0.1:9878") as ctl:
    for group in ctl.sync_state_set(["broker-a"]):
        print(group.master_id, group.epoch, group.sync_state_set)

A retriable failure of one controller (it cannot reach etcd, it does not answer) is tried on
the next one of the list; the last error is raised.
"""

from __future__ import annotations

import time
from typing import TypeVar

from ferry.client.instance import not_started
from ferry.client.lifecycle import Lifecycle
from ferry.client.transport import ConnectionPool, expect
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import FerryError, InvalidParameterError, RequestTimeoutError
from ferry.protocol.messages import (
    AnyRequest,
    BrokerGroupState,
    ControllerCleanBrokerDataReply,
    ControllerCleanBrokerDataRequest,
    ControllerElectMasterReply,
    ControllerElectMasterRequest,
    ControllerGetMetadataRequest,
    ControllerGetSyncStateDataRequest,
    ControllerMetadataReply,
    ControllerSyncStateDataReply,
    Reply,
)

R = TypeVar("R", bound=Reply)
POLL_S = 0.2


def parse_controllers(text: str) -> list[str]:
    addrs = [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise InvalidParameterError(f"controller address {addr!r} is not host:port")
    if not addrs:
        raise InvalidParameterError("no controller address given")
    return addrs


class ControllerAdmin(Lifecycle):
    def __init__(
        self,
        controller_addr: str,
        *,
        timeout_ms: int = 3000,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        self.addrs = parse_controllers(controller_addr)
        self.credentials = credentials
        self.tls_server_key = tls_server_key
        self._timeout_s = timeout_ms / 1000
        self._pool: ConnectionPool | None = None

    def start(self) -> None:
        if self._pool is None:
            self._pool = ConnectionPool(
                credentials=self.credentials, tls_server_key=self.tls_server_key
            )

    def shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _request(self, body: AnyRequest, cls: type[R]) -> R:
        if self._pool is None:
            raise not_started("controller admin")
        last: FerryError | None = None
        for addr in self.addrs:
            try:
                return expect(self._pool.get(addr).request(body, timeout_s=self._timeout_s), cls)
            except FerryError as err:
                last = type(err)(f"controller {addr}: {err.message}", code=err.code)
                last.retriable = err.retriable
                if not err.retriable:
                    break
        assert last is not None
        raise last

    def sync_state_set(
        self, broker_names: list[str] | None = None, cluster: str = ""
    ) -> list[BrokerGroupState]:
        """getSyncStateSet: each group's master, epoch, in-sync set and replicas."""
        body = ControllerGetSyncStateDataRequest(cluster=cluster, broker_names=broker_names or [])
        return self._request(body, ControllerSyncStateDataReply).groups

    def metadata(self) -> ControllerMetadataReply:
        """getControllerMetaData: the controller asked, the live controllers, its etcd."""
        return self._request(ControllerGetMetadataRequest(), ControllerMetadataReply)

    def elect_master(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str = "",
        *,
        replica_id: int = 0,
        wait: bool = True,
    ) -> BrokerGroupState:
        """electMaster: the replica at broker_addr (or replica_id) becomes master. A live
        master is fenced first and replaced once its lease ran out: with wait, this returns
        then (or raises RequestTimeoutError past the controller's bound); without, at once
        (handover_to set)."""
        body = ControllerElectMasterRequest(
            cluster, broker_name, broker_addr=broker_addr, replica_id=replica_id
        )
        reply = self._request(body, ControllerElectMasterReply)
        if not reply.pending or not wait:
            return reply.state
        target = reply.state.handover_to
        deadline = time.monotonic() + reply.wait_ms / 1000 + self._timeout_s
        while time.monotonic() < deadline:
            time.sleep(POLL_S)  # wait-ok: polling the controller until its switch is done
            groups = self.sync_state_set([broker_name], cluster=cluster)
            if groups and groups[0].master_id == target and not groups[0].handover_to:
                return groups[0]
        raise RequestTimeoutError(
            f"replica {target} did not become master of {broker_name} within {reply.wait_ms} ms"
        )

    def clean_broker_metadata(
        self,
        cluster: str,
        broker_name: str,
        replica_ids: list[int] | None = None,
        *,
        clean_living: bool = False,
    ) -> ControllerCleanBrokerDataReply:
        """cleanBrokerMetadata: forget replicas (none named: the whole group)."""
        body = ControllerCleanBrokerDataRequest(
            cluster, broker_name, replica_ids=replica_ids or [], clean_living=clean_living
        )
        return self._request(body, ControllerCleanBrokerDataReply)
