"""Which queues of a topic each member of a consumer group takes (RocketMQ's
AllocateMessageQueueStrategy). Every member computes the same answer from the same sorted
lists of member ids and queues, so each queue has exactly one owner without any coordinator.

- averagely (AVG, the default): contiguous blocks, the first members one queue larger;
- by_circle (AVG_BY_CIRCLE): round robin, queue i to member i mod n;
- consistent_hash: a hash ring with `virtual_nodes` points per member, so a member joining or
  leaving moves only the queues next to its points.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from ferry.client.message import MessageQueue
from ferry.protocol.errors import InvalidParameterError

STRATEGIES = ("averagely", "by_circle", "consistent_hash")
VIRTUAL_NODES = 10


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise InvalidParameterError(f"allocate must be one of {STRATEGIES}, not {strategy!r}")


def allocate(
    strategy: str,
    me: str,
    members: Sequence[str],
    queues: Sequence[MessageQueue],
    *,
    virtual_nodes: int = VIRTUAL_NODES,
) -> list[MessageQueue]:
    """The queues `me` takes; none when `me` is not (yet) among the members."""
    check_strategy(strategy)
    ids = sorted(set(members))
    ordered = sorted(set(queues))
    if me not in ids or not ordered:
        return []
    index = ids.index(me)
    if strategy == "averagely":
        return averagely(index, len(ids), ordered)
    if strategy == "by_circle":
        return ordered[index :: len(ids)]
    ring = HashRing(ids, virtual_nodes)
    return [q for q in ordered if ring.owner(str(q)) == me]


def averagely(index: int, count: int, queues: list[MessageQueue]) -> list[MessageQueue]:
    base, extra = divmod(len(queues), count)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return queues[start : start + size]


def ring_hash(key: str) -> int:
    """A hash every process agrees on (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:8], "big")


class HashRing:
    def __init__(self, members: Sequence[str], virtual_nodes: int = VIRTUAL_NODES) -> None:
        if virtual_nodes < 1:
            raise InvalidParameterError("virtual_nodes must be at least 1")
        points = sorted(
            (ring_hash(f"{member}-{i}"), member) for member in members for i in range(virtual_nodes)
        )
        self._hashes = [h for h, _ in points]
        self._members = [m for _, m in points]

    def owner(self, key: str) -> str:
        """The member at the first point at or after the key's hash, wrapping around."""
        if not self._hashes:
            raise InvalidParameterError("a hash ring needs at least one member")
        at = bisect.bisect_left(self._hashes, ring_hash(key)) % len(self._hashes)
        return self._members[at]
