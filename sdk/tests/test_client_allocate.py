"""Rebalance strategies: every member computes the same split from the same lists."""

from __future__ import annotations

import pytest

from ferry.client.allocate import STRATEGIES, allocate
from ferry.client.message import MessageQueue
from ferry.protocol.errors import InvalidParameterError

QUEUES = [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(4)]


def split(strategy: str, members: list[str]) -> dict[str, list[MessageQueue]]:
    return {m: allocate(strategy, m, members, QUEUES) for m in members}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 11])
def test_every_queue_has_exactly_one_owner(strategy: str, count: int) -> None:
    members = [f"10.0.0.{i}@{i}" for i in range(count)]
    taken = [q for queues in split(strategy, members).values() for q in queues]
    assert sorted(taken) == sorted(QUEUES)


def test_averagely_gives_contiguous_blocks_the_first_members_one_larger() -> None:
    got = split("averagely", ["c", "a", "b"])  # sorted: a, b, c
    assert got["a"] == QUEUES[0:3]
    assert got["b"] == QUEUES[3:6]
    assert got["c"] == QUEUES[6:8]


def test_by_circle_deals_queues_round_robin() -> None:
    got = split("by_circle", ["a", "b", "c"])
    assert got["a"] == [QUEUES[0], QUEUES[3], QUEUES[6]]
    assert got["c"] == [QUEUES[2], QUEUES[5]]


def test_more_members_than_queues_leaves_some_idle() -> None:
    members = [f"m{i:02d}" for i in range(10)]
    got = split("averagely", members)
    assert [len(got[m]) for m in members] == [1] * 8 + [0, 0]


def test_consistent_hash_moves_only_the_leavers_queues() -> None:
    members = [f"10.0.0.{i}@{i}" for i in range(4)]
    queues = [MessageQueue("T", "broker-a", i) for i in range(64)]
    before = {q: m for m in members for q in allocate("consistent_hash", m, members, queues)}
    rest = members[:-1]
    after = {q: m for m in rest for q in allocate("consistent_hash", m, rest, queues)}
    moved = [q for q in queues if before[q] != after[q]]
    assert moved and all(before[q] == members[-1] for q in moved)


def test_member_not_in_the_list_takes_nothing_and_order_of_input_does_not_matter() -> None:
    assert allocate("averagely", "stranger", ["a", "b"], QUEUES) == []
    assert allocate("by_circle", "a", ["b", "a"], QUEUES[::-1]) == allocate(
        "by_circle", "a", ["a", "b"], QUEUES
    )


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(InvalidParameterError):
        allocate("random", "a", ["a"], QUEUES)
