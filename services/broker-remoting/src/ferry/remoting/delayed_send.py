"""Delayed sends: a message with a delay level or a delivery time is stored aside until due.

Only requests whose header says so (`delay_level`, `deliver_at_ms`; the SDK sends such
messages alone) pay for decoding their record here; every other send stays a forwarder.
A delay level n goes to SCHEDULE_TOPIC_XXXX queue n - 1 (levels past the last one are the
last one, as RocketMQ), a delivery time to the timer topic; both keep the real topic and queue
in REAL_TOPIC / REAL_QID, where the scheduler finds them when they are due.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from ferry.protocol import record
from ferry.protocol.errors import (
    InvalidParameterError,
    MessageIllegalError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import SendMessageRequest
from ferry.protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from ferry.runtime.config import BrokerConfig


class Redirect(NamedTuple):
    topic: str
    queue_id: int
    record: bytes


def schedule_record(
    rec: record.Record, real_topic: str, real_qid: int, props: dict[str, str], topic: str, qid: int
) -> Redirect:
    extra = {
        record.PROPERTY_REAL_TOPIC: real_topic,
        record.PROPERTY_REAL_QID: str(real_qid),
        **props,
    }
    # a scheduled copy must not look delivered already (the scheduler's recovery counts those)
    raw = record.retopic(
        rec, topic, set_props=extra, drop_props=(record.PROPERTY_SCHEDULED_FROM,), queue_id=qid
    )
    return Redirect(topic, qid, raw)


class DelayRules:
    def __init__(self, config: BrokerConfig) -> None:
        self.max_level = len(config.delay_levels_ms)
        self.max_delay_ms = config.timer_max_delay_sec * 1000
        self.scheduler = bool(config.scheduler_endpoint)

    def level_of(self, asked: int) -> int:
        return min(asked, self.max_level)

    def redirect(self, raw: Any, req: SendMessageRequest, queue_id: int) -> Redirect | None:
        """Where a delayed send is stored instead; None when it is due already (a delivery
        time in the past is an ordinary send, as in RocketMQ 5)."""
        if req.count != 1:
            raise InvalidParameterError("a delayed message is sent alone (count 1), not batched")
        if not self.scheduler:
            raise ServiceNotAvailableError(
                "this broker runs no scheduler (schedulerEndpoint is empty): delayed and timer "
                "messages cannot be held"
            )
        try:
            rec = next(record.iter_records(bytes(raw)))
        except (record.RecordError, StopIteration, IndexError, ValueError) as exc:
            raise MessageIllegalError(f"delayed message does not decode: {exc}") from None
        if req.deliver_at_ms > 0:
            wait_ms = req.deliver_at_ms - int(time.time() * 1000)
            if wait_ms > self.max_delay_ms:
                raise MessageIllegalError(
                    f"deliver_at_ms is {wait_ms} ms away, past timerMaxDelaySec "
                    f"({self.max_delay_ms // 1000} s)"
                )
            if wait_ms <= 0:
                return None
            props = {record.PROPERTY_TIMER_DELIVER_MS: str(req.deliver_at_ms)}
            return schedule_record(rec, req.topic, queue_id, props, TIMER_TOPIC, 0)
        if req.delay_level < 0:
            raise InvalidParameterError(f"delay level {req.delay_level} is negative")
        level = self.level_of(req.delay_level)
        props = {record.PROPERTY_DELAY: str(level)}
        return schedule_record(rec, req.topic, queue_id, props, SCHEDULE_TOPIC, level - 1)
