"""Two broker groups of one cluster (issue 26, "beyond one machine"): broker-a (three
replicas) and broker-b (two), both in controller mode under one etcd and one controller, on
one name server; every replica its own `ferry serve broker` tree. A topic spread over both is
produced and consumed through both; kill -9 of broker-a's master tree under traffic fails
broker-a over and leaves broker-b untouched: same master, epoch and in-sync set, and its
queues take every send meanwhile."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from failover_support import (
    ControlledGroup,
    Traffic,
    add_group,
    final_log,
    group_state,
    in_sync_count,
    start_group,
    topic_on_replicas,
)
from ha_support import broker_ids
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import TopicNotExistError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

TOPIC = "Spread"


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[tuple[ControlledGroup, ControlledGroup]]:
    a = start_group(tmp_path)
    try:
        # two replicas: the smallest group that can fail over, one tree fewer on the machine
        b = add_group(a, "broker-b", replicas=2)
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


def on_both(admin: Admin) -> bool:
    try:
        route = admin.topic_route(TOPIC)
    except TopicNotExistError:  # until the masters' next registration carries it
        return False
    return sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]


def acks_on(traffic: Traffic, broker: str, since: float = 0.0) -> int:
    return sum(1 for ack in list(traffic.acks) if ack.broker == broker and ack.at >= since)


def read_from_both(traffic: Traffic) -> bool:
    """The consumer has read messages that each group acknowledged."""
    read = {ack.broker for ack in list(traffic.acks) if ack.body in traffic.delivered}
    return read == {"broker-a", "broker-b"}


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch within [start, end] without an acknowledged send."""
    points = [start, *(t for t in times if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points))


def test_failover_in_broker_a_leaves_broker_b_serving_and_loses_nothing(
    groups: tuple[ControlledGroup, ControlledGroup],
) -> None:
    a, b = groups
    old_a = a.master(60)
    b_master = b.master(60)
    for name in ("broker-a", "broker-b"):
        wait_for(lambda n=name: 0 in broker_ids(a.namesrv_addr, n), 30, f"{name} routed as 0")
    with Admin(a.namesrv_addr) as admin:
        # on the master of every group of the cluster: four queues on each (again, should a
        # master have been between registrations: creating is idempotent)
        wait_for(lambda: len(admin.create_topic(TOPIC, 4, 4)) == 2, 30, "the topic on both")
        wait_for(lambda: on_both(admin), 30, "the topic routed to both groups")
    for group in (a, b):  # so that a new master of either has it
        wait_for(lambda g=group: topic_on_replicas(g, TOPIC), 30, "the topic on every replica")

    spread = Traffic(a.namesrv_addr, TOPIC, name="spread")
    only_b = Traffic(a.namesrv_addr, TOPIC, name="only-b", only_broker="broker-b")
    spread.start()
    only_b.start()
    try:
        # produced through both groups, and consumed from both
        for name in ("broker-a", "broker-b"):
            wait_for(lambda n=name: acks_on(spread, n) > 20, 60, f"sends acknowledged by {name}")
        wait_for(lambda: read_from_both(spread), 60, "messages of both groups read")
        wait_for(lambda: in_sync_count(a) >= 2 and in_sync_count(b) == 2, 60, "slaves in sync")
        b_before = group_state(b)
        a_before = group_state(a)
        assert b_before is not None and a_before is not None

        killed_at = time.monotonic()
        old_a.kill_tree()
        new_a = wait_for(
            lambda: next((r for r in a.others(old_a) if r.last_role() == "master"), None),
            60,
            "a new master of broker-a",
        )
        resumed_at: float = wait_for(
            lambda: spread.first_ack_after(killed_at, "broker-a"), 60, "broker-a writes again"
        )
        # broker-b meanwhile, and a little after
        wait_for(lambda: acks_on(only_b, "broker-b", resumed_at) > 20, 30, "broker-b after")
    finally:
        spread.stop()
        only_b.stop()

    took = resumed_at - killed_at
    b_times = [ack.at for ack in only_b.acks]
    gap = longest_gap(b_times, killed_at, resumed_at)
    during = sum(1 for t in b_times if killed_at <= t <= resumed_at)
    print(
        f"broker-a: writes again {took:.2f} s after the kill (replica {old_a.replica_id} -> "
        f"{new_a.replica_id}); broker-b meanwhile: {during} sends acknowledged, longest gap "
        f"{gap:.2f} s, failures {only_b.failed}; spread traffic: {len(spread.acked)} "
        f"acknowledged, failures {spread.failed}"
    )

    # broker-a failed over to another replica at a higher epoch
    a_after = group_state(a)
    assert a_after is not None
    assert a_after.master_id == new_a.replica_id != old_a.replica_id
    assert a_after.epoch > a_before.epoch
    # broker-b: nothing moved, and every send to its queues succeeded throughout
    b_after = group_state(b)
    assert b_after is not None
    assert (b_after.master_id, b_after.epoch, sorted(b_after.sync_state_set)) == (
        b_before.master_id,
        b_before.epoch,
        sorted(b_before.sync_state_set),
    )
    assert b.master(5) is b_master
    assert not [r for r in b.replicas.values() if r.said("epoch 2")]
    assert only_b.failed == {}
    assert during > 0
    assert gap < 5.0, gap  # its sends went on while broker-a had no master

    # every acknowledged message, of both groups, is read back; nothing from a cut tail
    acked = set(spread.acked) | set(only_b.acked)
    final = final_log(a, acked, topic=TOPIC)
    assert acked - final == set()
    assert spread.delivered - final == set()
