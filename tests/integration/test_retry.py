"""Retries through the scheduler: a failed message comes back after its growing delay
(level 3 + reconsume times), and once out of reconsume times lands in %DLQ%group with its
origin recorded."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from itest_support import wait_for
from scheduler_support import scheduler_cluster

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)

pytestmark = pytest.mark.integration

# retry n waits level 2 + n: 1 s, then 2 s
LEVELS = "1s 1s 1s 2s 2s"
MAX_RECONSUME = 2


def test_a_failing_message_is_retried_after_its_delay_then_dead_lettered(tmp_path: Path) -> None:
    cluster = scheduler_cluster(tmp_path, messageDelayLevel=LEVELS)
    try:
        with Admin(cluster.namesrv) as admin:
            admin.create_topic("Flaky", 1, 1)
        seen: list[tuple[float, int, str]] = []
        lock = threading.Lock()

        def always_fails(msgs: list[MessageExt]) -> ConsumeResult:
            with lock:
                seen.extend((time.monotonic(), m.reconsume_times, m.queue.topic) for m in msgs)
            return ConsumeResult.RECONSUME_LATER

        consumer = PushConsumer(
            "cg-flaky",
            cluster.namesrv,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            max_reconsume_times=MAX_RECONSUME,
        )
        consumer.subscribe("Flaky")
        consumer.register_listener(always_fails)
        with consumer, Producer("pg-flaky", cluster.namesrv) as producer:
            sent = producer.send(Message("Flaky", b"poison", keys=["p-1"]))

            def in_dlq() -> bool:
                with Admin(cluster.namesrv) as admin:
                    try:
                        return admin.max_offset(MessageQueue("%DLQ%cg-flaky", "broker-a", 0)) == 1
                    except Exception:  # noqa: BLE001 - the DLQ topic does not exist yet
                        return False

            wait_for(in_dlq, 30, "the message in the DLQ")
        # seen 1 + max reconsume times, the retries from the automatically subscribed retry topic
        assert [(r, t) for _, r, t in seen] == [
            (0, "Flaky"),
            (1, "%RETRY%cg-flaky"),
            (2, "%RETRY%cg-flaky"),
        ]
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
        assert gaps[0] >= 1.0 and gaps[1] >= 2.0, gaps  # level 3 (1 s), then level 4 (2 s)
        with PullConsumer("cg-dlq-reader", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as r:
            r.assign([MessageQueue("%DLQ%cg-flaky", "broker-a", 0)])
            dead: list[MessageExt] = []
            wait_for(lambda: dead.extend(r.poll(0.5)) or dead, 20, "the DLQ read")
        (msg,) = dead
        assert msg.body == b"poison" and msg.keys == ["p-1"]
        assert msg.msg_id == sent.msg_id
        assert msg.properties["DLQ_ORIGIN_TOPIC"] == "Flaky"
        assert msg.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.msg_id
        assert msg.reconsume_times == MAX_RECONSUME + 1
    finally:
        cluster.local.stop()
