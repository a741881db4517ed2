"""Latency fault avoidance: RocketMQ 5's tables, isolation, and queue selection around it."""

from __future__ import annotations

import pytest

from ferry.client.latency_fault import FaultConfig, LatencyFaultTolerance
from ferry.client.message import MessageQueue
from ferry.client.publish import select_available
from ferry.protocol.errors import InvalidParameterError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("latency_ms", "isolated_ms"),
    [(10, 0), (99, 0), (550, 2000), (1799, 2000), (1800, 5000), (3000, 6000), (15000, 30000)],
)
def test_latency_is_bucketed_by_rocketmq_5_tables(latency_ms: int, isolated_ms: int) -> None:
    assert FaultConfig(enabled=True).isolation_ms(latency_ms) == isolated_ms


def test_a_failure_isolates_a_broker_for_ten_seconds() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(FaultConfig(enabled=True), clock)
    faults.update("broker-b", 0, failed=True)
    assert not faults.available("broker-b")
    assert faults.available("broker-a")
    clock.now += 9.9
    assert not faults.available("broker-b")
    clock.now += 0.2
    assert faults.available("broker-b")


def test_a_fast_answer_clears_an_isolation_and_disabled_tolerance_records_nothing() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(FaultConfig(enabled=True), clock)
    faults.update("b", 600)
    assert not faults.available("b")
    faults.update("b", 20)
    assert faults.available("b")
    off = LatencyFaultTolerance(FaultConfig(enabled=False), clock)
    off.update("b", 0, failed=True)
    assert off.available("b")


def test_selection_skips_isolated_brokers_then_falls_back_to_the_soonest() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(FaultConfig(enabled=True), clock)
    queues = tuple(MessageQueue("T", b, i) for b in ("a", "b", "c") for i in range(2))
    faults.update("a", 0, failed=True)
    picked = {select_available(queues, start, None, faults).broker_name for start in range(6)}
    assert picked == {"b", "c"}
    assert select_available(queues, 0, "b", faults).broker_name == "c"  # the one that just failed
    faults.update("b", 15000)  # 30 s
    faults.update("c", 3000)  # 6 s
    # every broker isolated: the one usable soonest (c, then a at 10 s, b at 30 s)
    assert {select_available(queues, s, None, faults).broker_name for s in range(6)} == {"c"}
    clock.now += 7
    assert {select_available(queues, s, "c", faults).broker_name for s in range(6)} == {"c"}


def test_tables_must_match_and_ascend() -> None:
    with pytest.raises(InvalidParameterError):
        FaultConfig(latency_max_ms=(1, 2), not_available_ms=(0,))
    with pytest.raises(InvalidParameterError):
        FaultConfig(latency_max_ms=(5, 1), not_available_ms=(0, 0))
