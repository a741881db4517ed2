"""Fencing in controller mode (issue 26.4): remoting acknowledges a write only under a write
lease, granted by the broker's agent after the controller answered; none is acknowledged
after it lapsed, and a lease of an older epoch is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from itest_support import Cluster, RawClient, start_cluster

from ferry.client import Admin, FerryError, Message, Producer, SendStatus
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import ErrorReply, GrantWriteLeaseRequest, OkReply

pytestmark = pytest.mark.integration

CONTROLLED = {
    "enableControllerMode": "true",
    "controllerAddr": "127.0.0.1:9",  # no controller: this test grants the lease itself
    "brokerId": "1",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("lease"), overrides=CONTROLLED)
    try:
        yield c
    finally:
        c.local.stop()


def grant(cluster: Cluster, seconds: float, epoch: int) -> object:
    client = RawClient(cluster.broker_addr)
    try:
        until = time.monotonic() + seconds  # CLOCK_MONOTONIC: the same clock as remoting's
        return client.call(GrantWriteLeaseRequest(until_monotonic=until, epoch=epoch))[0]
    finally:
        client.close()


def send(cluster: Cluster, body: bytes) -> SendStatus | FerryError:
    with Producer("pg-lease", cluster.namesrv, send_timeout_ms=1500, retry_times=0) as p:
        try:
            return p.send(Message("Leased", body)).status
        except FerryError as err:
            return err


def test_writes_are_acknowledged_only_under_a_lease(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Leased", 2, 2)
    refused = send(cluster, b"no lease yet")
    assert isinstance(refused, FerryError) and refused.retriable, refused
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "write lease" in str(refused)
    assert isinstance(grant(cluster, 30, epoch=1), OkReply)
    assert send(cluster, b"leased") == SendStatus.SEND_OK
    assert isinstance(grant(cluster, 0.2, epoch=1), OkReply)  # a short one, left to lapse
    time.sleep(0.3)  # wait-ok: the lease's own length; the condition under test is its lapse
    lapsed = send(cluster, b"lapsed")
    assert isinstance(lapsed, FerryError) and "write lease" in str(lapsed), lapsed


def test_a_lease_of_an_older_epoch_is_refused(cluster: Cluster) -> None:
    assert isinstance(grant(cluster, 30, epoch=3), OkReply)
    old = grant(cluster, 30, epoch=2)
    assert isinstance(old, ErrorReply) and "epoch 2" in old.message, old
    assert send(cluster, b"epoch 3") == SendStatus.SEND_OK


def test_the_master_registers_as_id_0_under_its_replica_id(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        info = admin.cluster_info()
    assert info.brokers["broker-a"].broker_addrs == {0: cluster.broker_addr}
