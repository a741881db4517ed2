"""What a consumer does when an admin resets its group's offsets (mqadmin resetOffsetByTime):
the broker sends each live member a ResetOffsetNotice (RocketMQ's
RESET_CONSUMER_CLIENT_OFFSET) and the member moves the queues it holds to the new offsets,
dropping what it had pulled for the old ones."""

from __future__ import annotations

import logging

from ferry.client.instance import ClientInstance
from ferry.client.message import MessageQueue
from ferry.client.puller import Puller
from ferry.protocol.messages import AnyReply, ResetOffsetNotice

log = logging.getLogger("ferry.client.consumer")


def on_reset_notice(inst: ClientInstance, group: str, puller: Puller, body: AnyReply) -> bool:
    """True when `body` was a reset of `group` (handled on the timer thread, not the I/O one)."""
    if not isinstance(body, ResetOffsetNotice) or body.consumer_group != group:
        return False
    offsets = {
        MessageQueue(e.topic, body.broker_name, e.queue_id): e.offset
        for e in body.offsets
        if e.topic == body.topic
    }

    def apply() -> None:
        moved = puller.reset_offsets(offsets)
        log.info("%s: offsets of %s reset by an admin; %d queue(s) moved", group, body.topic, moved)

    inst.ticker.later(0, apply)
    return True
