"""Delayed and timer messages across a failover. A slave's scheduler delivers nothing; it
keeps the progress of its master's (delivered level offsets, the timer read time, the restart
scan point), which remoting's slave sync brings, and takes the timer queue of its replicated
log into bucket files of its own. A slave restarted as master then resumes the delay levels
and the timers there, and its start-up scan of the same log skips what the master delivered
after that snapshot: every message arrives once."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest
from consume_support import create_topic
from ha_support import start_pair, status
from itest_support import wait_for
from scheduler_support import drain

from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer
from ferry.protocol.errors import NoPermissionError
from ferry.protocol.messages import (
    ErrorReply,
    SchedulerAdoptProgressRequest,
    SchedulerProgress,
    SchedulerStatusReply,
    SchedulerStatusRequest,
)
from ferry.runtime.launcher import LocalCluster, start_broker_services

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "Later"


def slave_view(addr: str) -> dict[str, str]:
    """The slave scheduler's adopted progress, as its status shows it through remoting."""
    reply = status(addr, SchedulerStatusRequest())
    assert isinstance(reply, SchedulerStatusReply), reply
    return reply.extra


def test_a_slave_restarted_as_master_delivers_each_delayed_message_once(tmp_path: Path) -> None:
    pair = start_pair(tmp_path, messageDelayLevel="1s 25s")
    promoted: LocalCluster | None = None
    try:
        create_topic(pair.namesrv, TOPIC, 1)
        now_ms = int(time.time() * 1000)
        with Producer("delayed-sender", pair.namesrv) as producer:
            for i in range(10):
                producer.send(Message(TOPIC, f"soon-{i}".encode(), delay_level=1))
                producer.send(Message(TOPIC, f"late-{i}".encode(), delay_level=2))
                producer.send(Message(TOPIC, f"t-soon-{i}".encode(), deliver_at_ms=now_ms + 1000))
                producer.send(Message(TOPIC, f"t-late-{i}".encode(), deliver_at_ms=now_ms + 25_000))
        # the soon ones delivered by the master, and its progress adopted by the slave's
        # scheduler: level 1 done, and the timer read time past the soon timers' bucket

        def adopted() -> bool:
            view = slave_view(pair.slave.broker_addr)
            return (
                view.get("slaveScheduleOffset_1") == "10"
                and int(view.get("slaveTimerReadMs", "0")) > now_ms + 2000
            )

        wait_for(adopted, 30, "the slave's scheduler to hold the master's progress")
        view = slave_view(pair.slave.broker_addr)
        assert view.get("slaveScheduleOffset_2", "0") == "0"  # the 25 s ones still wait
        assert int(view["slaveProgressAdopted"]) >= 1
        assert int(time.time() * 1000) < now_ms + 20_000, "too slow: the late ones are due"
        pair.wait_in_sync()

        pair.stop_master(kill=True)
        pair.stop_slave()
        promoted = LocalCluster(namesrv_addr=pair.namesrv)
        start_broker_services(
            promoted,
            str(tmp_path / "broker-a-s"),
            namesrv_addr=pair.namesrv,
            overrides={**pair.overrides, "brokerRole": "ASYNC_MASTER", "brokerId": "0"},
        )

        consumer = PullConsumer(
            "delay-readers", pair.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        consumer.subscribe(TOPIC)
        with consumer:
            got = drain(consumer, 40, timeout=60)
            got += drain(consumer, 1, timeout=2)  # nothing more may come
        bodies = collections.Counter(m.body.decode() for m in got)
        kinds = ("soon", "late", "t-soon", "t-late")
        expected = {f"{kind}-{i}" for kind in kinds for i in range(10)}
        assert set(bodies) == expected, sorted(set(bodies) ^ expected)
        assert all(n == 1 for n in bodies.values()), bodies.most_common(3)
    finally:
        if promoted is not None:
            promoted.stop()
        pair.close()


def test_a_masters_scheduler_refuses_to_adopt_progress(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        scheduler = pair.master.get("scheduler").endpoints["endpoint"]
        reply = status(scheduler, SchedulerAdoptProgressRequest(progress=SchedulerProgress()))
        assert isinstance(reply, ErrorReply)
        assert reply.code == NoPermissionError.code
    finally:
        pair.close()
