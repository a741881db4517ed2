"""Automatic failover in controller mode (issue 26): a group of three replicas, each its own
`ferry serve broker` tree, elects a master through the controller on etcd; when the master's
tree is killed, an in-sync replica takes over and sends resume without losing an acknowledged
message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_support import ControlledGroup, start_group
from ha_support import broker_ids
from itest_support import wait_for

from ferry.client import (
    Admin,
    ConsumeFromWhere,
    FerryError,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ControlledGroup]:
    g = start_group(tmp_path)
    try:
        yield g
    finally:
        g.close()


def send_ok(producer: Producer, body: bytes) -> bool:
    try:
        return producer.send(Message("Failover", body)).status == SendStatus.SEND_OK
    except FerryError:
        return False


def test_killing_the_masters_tree_elects_an_in_sync_replica_and_loses_nothing(
    group: ControlledGroup,
) -> None:
    master = group.master(60)
    wait_for(lambda: 0 in broker_ids(group.namesrv_addr), 30, "the master routed as id 0")
    with Admin(group.namesrv_addr) as admin:
        admin.create_topic("Failover", 2, 2)
    acked: list[bytes] = []
    with Producer("pg-failover", group.namesrv_addr, send_timeout_ms=3000) as producer:
        wait_for(lambda: send_ok(producer, b"first"), 30, "a first acknowledged send")
        acked.append(b"first")
        for i in range(50):
            body = f"before-{i}".encode()
            if send_ok(producer, body):
                acked.append(body)
        killed_at = time.monotonic()
        master.kill_tree()
        wait_for(lambda: send_ok(producer, b"after"), 60, "a send acknowledged by a new master")
        took = time.monotonic() - killed_at
        acked.append(b"after")
    new = group.master(30)
    assert new is not master
    print(f"failover: first acknowledged write {took:.1f} s after the kill")
    assert took < 20
    got: set[bytes] = set()
    with PullConsumer(
        "cg-failover", group.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Failover")
        deadline = time.monotonic() + 30
        while not set(acked) <= got and time.monotonic() < deadline:
            got.update(m.body for m in consumer.poll(timeout=0.5))
    assert set(acked) - got == set()
