"""Fencing in controller mode (issue 26.4, 38): remoting acknowledges a write, the store
appends one and the master registers with the name servers, only under a write lease,
granted by the broker's agent after the controller answered; nothing is acknowledged after it
lapsed, and a lease of an older epoch is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from itest_support import Cluster, RawClient, wait_for

from ferry.admin import Admin
from ferry.client import FerryError, Message, Producer, SendStatus
from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    ErrorReply,
    GrantWriteLeaseRequest,
    OkReply,
    SendMessageRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.testing.cluster import running_cluster

pytestmark = pytest.mark.integration

CONTROLLED = {
    "enableControllerMode": "true",
    "controllerAddr": "127.0.0.1:9",  # no controller: this test grants the lease itself
    "brokerId": "1",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("lease"), overrides=CONTROLLED) as c:
        yield c


def grant(cluster: Cluster, seconds: float, epoch: int) -> object:
    """As the agent grants it: to the store, then to remoting (whose answer is returned)."""
    until = time.monotonic() + seconds  # CLOCK_MONOTONIC: the same clock as remoting's
    answer: object = None
    for endpoint in (cluster.local.store_endpoint, cluster.broker_addr):
        client = RawClient(endpoint)
        try:
            answer = client.call(GrantWriteLeaseRequest(until_monotonic=until, epoch=epoch))[0]
        finally:
            client.close()
    return answer


def master_routed(cluster: Cluster) -> bool:
    with Admin(cluster.namesrv) as admin:
        info = admin.cluster_info()
    data = info.brokers.get("broker-a")
    return data is not None and data.broker_addrs.get(0) == cluster.broker_addr


def send(cluster: Cluster, body: bytes) -> SendStatus | FerryError:
    with Producer("pg-lease", cluster.namesrv, send_timeout_ms=1500, retry_times=0) as p:
        try:
            return p.send(Message("Leased", body)).status
        except FerryError as err:
            return err


def raw_send(cluster: Cluster, body: bytes) -> object:
    """A send straight to remoting: before its lease the master is in no route."""
    rec = record.encode_record(b"Leased", body, record.encode_properties({}))
    with BlockingClient(f"tcp://{cluster.broker_addr}") as client:
        answer = client.call(SendMessageRequest("pg-raw", "Leased", 0), 3000, [rec])
    return None if answer is None else answer[0]


def test_writes_are_acknowledged_only_under_a_lease(cluster: Cluster) -> None:
    # not confirmed by its agent yet: it names itself master to no name server
    assert not master_routed(cluster)
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Leased", 2, 2, broker_addr=cluster.broker_addr)
    refused = raw_send(cluster, b"no lease yet")
    assert isinstance(refused, ErrorReply) and refused.retriable, refused
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "write lease" in refused.message
    assert isinstance(grant(cluster, 30, epoch=1), OkReply)
    wait_for(lambda: master_routed(cluster), 10, "registered once its lease came")
    assert send(cluster, b"leased") == SendStatus.SEND_OK
    assert isinstance(grant(cluster, 0.2, epoch=1), OkReply)  # a short one, left to lapse
    time.sleep(0.3)  # wait-ok: the lease's own length; the condition under test is its lapse
    lapsed = send(cluster, b"lapsed")
    assert isinstance(lapsed, FerryError) and "write lease" in str(lapsed), lapsed


def test_the_store_appends_nothing_after_the_lease_lapsed_even_when_remoting_asks(
    cluster: Cluster,
) -> None:
    """A put already past remoting's check when the tree was paused reaches the store after
    the lease lapsed: the store refuses it itself."""
    until = time.monotonic() + 30
    client = RawClient(cluster.broker_addr)
    try:  # remoting believes it holds a lease; the store's lapsed
        assert isinstance(client.call(GrantWriteLeaseRequest(until, epoch=1))[0], OkReply)
    finally:
        client.close()
    refused = raw_send(cluster, b"past remoting's check")
    assert isinstance(refused, ErrorReply), refused
    assert "store" in refused.message and "no write lease" in refused.message, refused
    assert refused.retriable


def test_a_lease_of_an_older_epoch_is_refused(cluster: Cluster) -> None:
    assert isinstance(grant(cluster, 30, epoch=3), OkReply)
    old = grant(cluster, 30, epoch=2)
    assert isinstance(old, ErrorReply) and "epoch 2" in old.message, old
    assert send(cluster, b"epoch 3") == SendStatus.SEND_OK


def test_the_master_registers_as_id_0_under_its_replica_id(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        info = admin.cluster_info()
    assert info.brokers["broker-a"].broker_addrs == {0: cluster.broker_addr}
