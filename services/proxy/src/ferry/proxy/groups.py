"""A consumer group's config as Ferry's brokers hold it, for the Settings a consumer's
Telemetry is answered with: max_attempts is retryMaxTimes + 1 (the first delivery and its
retries), as RocketMQ 5's proxy answers, and fifo is consumeMessageOrderly (whose receives
are orderly pops).

A lookup asks one master of the group's topics for its groups and keeps the answer TTL_S, so
that clients starting together do not each ask. A group no broker knows yet (it is made at
its first pop) has the defaults; so does one whose lookup fails: Settings must be answered
within the client's 10 s, whatever a broker does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ferry.protocol.errors import FerryError
from ferry.protocol.messages import SubscriptionGroupConfig
from ferry.proxy.consuming import Popper

log = logging.getLogger("ferry.proxy.groups")

TTL_S = 30.0
LOOKUP_TIMEOUT_S = 3.0
MAX_GROUPS = 10_000


class GroupConfigs:
    def __init__(self, popper: Popper, ttl_s: float = TTL_S) -> None:
        self._popper = popper
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[float, SubscriptionGroupConfig]] = {}

    async def get(self, group: str, topics: Sequence[str]) -> SubscriptionGroupConfig:
        now = asyncio.get_running_loop().time()
        kept = self._known.get(group)
        if kept is not None and now - kept[0] < self._ttl_s:
            return kept[1]
        found = SubscriptionGroupConfig(group_name=group)
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                listed = await self._popper.sub_groups(topics)
            found = next((g for g in listed if g.group_name == group), found)
        except (FerryError, TimeoutError) as err:
            log.info("config of group %s not read: %s", group, err)
            # the last one read if any (a FIFO group stays one), else the defaults; not kept
            return kept[1] if kept is not None else found
        if group not in self._known and len(self._known) >= MAX_GROUPS:
            self._known.pop(next(iter(self._known)))  # the oldest goes
        self._known[group] = (now, found)
        return found
