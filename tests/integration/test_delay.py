"""Delay levels through the scheduler: held for their level's time, then delivered to the
real topic once, also when the scheduler is killed in the middle."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from itest_support import wait_for
from scheduler_support import (
    consumer_of,
    drain,
    scheduler_cluster,
    scheduler_status,
    start_scheduler,
    stop_scheduler,
)

from ferry.admin import Admin
from ferry.client import Message, Producer, SendStatus

pytestmark = pytest.mark.integration

TOLERANCE_MS = 1500  # lateness allowed on a loaded 2-core machine (typically < 50 ms)


def test_levels_one_to_three_arrive_no_earlier_than_their_delay(tmp_path: Path) -> None:
    cluster = scheduler_cluster(tmp_path)
    try:
        with Admin(cluster.namesrv) as admin:
            admin.create_topic("Later", 2, 2)
        sent: dict[str, tuple[int, int]] = {}  # msg id -> (level, sent at ms)
        with Producer("pg-delay", cluster.namesrv) as producer:
            for level in (1, 2, 3):
                for i in range(3):
                    msg = Message("Later", f"{level}-{i}".encode(), tags="T", keys=[f"k{level}{i}"])
                    msg.delay_level = level
                    before = int(time.time() * 1000)
                    result = producer.send(msg)
                    assert result.status is SendStatus.SEND_OK
                    sent[result.msg_id] = (level, before)
            # a level past the last one waits as long as the last one (RocketMQ clamps)
            clamped = Message("Later", b"clamped")
            clamped.delay_level = 9
            sent[producer.send(clamped).msg_id] = (3, int(time.time() * 1000))
        consumer = consumer_of(cluster, "cg-delay", "Later")
        try:
            got = drain(consumer, len(sent), timeout=30)
        finally:
            consumer.shutdown()
        assert sorted(m.msg_id for m in got) == sorted(sent)
        for msg in got:
            level, sent_ms = sent[msg.msg_id]
            waited = msg.store_timestamp - sent_ms
            assert level * 1000 <= waited <= level * 1000 + TOLERANCE_MS, (level, waited)
            assert msg.topic == "Later"
            assert "DELAY" not in msg.properties
            assert msg.properties["REAL_TOPIC"] == "Later"
            assert msg.properties["UNIQ_KEY"] == msg.msg_id
            if msg.body != b"clamped":
                assert msg.tags == "T" and msg.keys == [f"k{msg.body.decode().replace('-', '')}"]
        status = scheduler_status(cluster)
        assert [(lv.level, lv.delay_ms) for lv in status.levels] == [
            (1, 1000),
            (2, 2000),
            (3, 3000),
        ]
        assert [(lv.offset, lv.max_offset) for lv in status.levels] == [(3, 3), (3, 3), (4, 4)]
    finally:
        cluster.local.stop()


def test_a_scheduler_killed_mid_way_delivers_every_delayed_message_once(tmp_path: Path) -> None:
    cluster = scheduler_cluster(tmp_path)
    total = 400
    try:
        with Admin(cluster.namesrv) as admin:
            admin.create_topic("Crash", 4, 4)
        with Producer("pg-crash", cluster.namesrv) as producer:
            futures = []
            started = time.monotonic()
            for i in range(total):
                msg = Message("Crash", str(i).encode())
                msg.delay_level = 1 + i % 2
                futures.append(producer.send_async(msg))
                # spread the sends over ~1.5 s so deliveries are under way at the kill
                while time.monotonic() < started + i * 0.004:
                    time.sleep(0.001)  # wait-ok: pacing the sends, not waiting for a state
            ids = [f.result(timeout=30).msg_id for f in futures]
        consumer = consumer_of(cluster, "cg-crash", "Crash")
        try:
            seen: collections.Counter[str] = collections.Counter()
            got = drain(consumer, total // 4, timeout=30)
            seen.update(m.msg_id for m in got)
            endpoint = stop_scheduler(cluster, kill=True)
            delivered_at_kill = len(got)
            start_scheduler(cluster, endpoint)
            got = drain(consumer, total - len(got), timeout=60)
            seen.update(m.msg_id for m in got)
            # everything is delivered: the levels reached their queue ends
            wait_for(
                lambda: all(lv.offset == lv.max_offset for lv in scheduler_status(cluster).levels),
                timeout=20,
                what="levels drained",
            )
            seen.update(m.msg_id for m in drain(consumer, 1, timeout=1.5))
            skipped = scheduler_status(cluster).skipped_duplicates
        finally:
            consumer.shutdown()
        assert delivered_at_kill < total
        assert sorted(seen) == sorted(ids), "lost messages"
        assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:5]
        print(f"killed after {delivered_at_kill} of {total}; {skipped} repeat(s) skipped")
    finally:
        cluster.local.stop()


def test_pending_delayed_messages_show_in_ferry_admin(tmp_path: Path) -> None:
    cluster = scheduler_cluster(tmp_path, messageDelayLevel="1s 2s 30s")
    try:
        with Producer("pg-admin", cluster.namesrv) as producer:
            for _ in range(2):
                msg = Message("Shown", b"x")
                msg.delay_level = 3
                producer.send(msg)
        ferry = str(Path(sys.executable).parent / "ferry")
        args = ["-n", cluster.namesrv, "-b", cluster.broker_addr]
        out = subprocess.run(
            [ferry, "admin", "schedulerStatus", *args, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        levels = {lv[0]: lv for lv in json.loads(out.stdout)["levels"]}
        assert levels[3][2:4] == [0, 2]  # delivered offset 0 of 2: two pending at level 3
        assert levels[1][2:4] == [0, 0]
        table = subprocess.run(
            [ferry, "admin", "schedulerStatus", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "delay levels" in table.stdout and "30000" in table.stdout
        with Admin(cluster.namesrv) as admin:  # brokerStatus's figures
            info = admin.broker_runtime_info(cluster.broker_addr)
        assert info["scheduleMessageOffset_3"] == "0,2"
        assert info["timerPendingCount"] == "0"
    finally:
        cluster.local.stop()
