"""Telling a consumer group's members that the group changed (RocketMQ's
NOTIFY_CONSUMER_IDS_CHANGED), so that they rebalance at once instead of at their next period.

Each client's channel is remembered from its heartbeats (the connection it came on, on
whichever wire: a ZeroMQ routing id, or a protocol door's connection); a notice is a typed
message (ConsumerIdsChangedNotice, a transaction check) that the channel encodes for its wire.
A notice is a hint: a client that misses one rebalances at its next period anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ferry.protocol.messages import AnyReply, ConsumerIdsChangedNotice
from ferry.remoting.calls import Caller
from ferry.runtime.call import Channel

log = logging.getLogger("ferry.remoting.notices")


class MemberNotifier:
    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}
        self.sent = 0

    def remember(self, client_id: str, call: Caller) -> None:
        """The connection a client's heartbeat came on is where its notices go."""
        self._channels[client_id] = call.channel

    def forget(self, client_id: str) -> None:
        self._channels.pop(client_id, None)

    def __len__(self) -> int:
        return len(self._channels)

    def has_channel(self, client_id: str) -> bool:
        return client_id in self._channels

    def tell(self, client_id: str, notice: AnyReply) -> bool:
        """Sends one client a notice on its connection; False when its connection is unknown."""
        channel = self._channels.get(client_id)
        if channel is None:
            return False
        channel.notify(notice)
        return True

    def notify(self, group: str, members: Iterable[str]) -> None:
        """Sends the notices now (callers answer the request that changed the group first, so
        that its reply comes before the notice)."""
        notice = ConsumerIdsChangedNotice(consumer_group=group)
        for client_id in members:
            channel = self._channels.get(client_id)
            if channel is None:
                continue
            channel.notify(notice)
            self.sent += 1
        log.debug("group %s changed; members told", group)
