"""Consumers and HA: reads move to the slave when the master leaves the route, back to the
master when it returns, and offsets committed meanwhile are neither lost nor re-read."""

from __future__ import annotations

from pathlib import Path

import pytest
from consume_support import create_topic
from ha_support import broker_ids, start_pair, status
from itest_support import wait_for

from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    GetAllTopicConfigRequest,
    OffsetReply,
    QueryConsumerOffsetRequest,
    TopicConfigListReply,
)

# two broker groups start per test: on a loaded 2-core machine that alone can take a minute
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "HaRead"


def consumer(namesrv: str) -> PullConsumer:
    return PullConsumer(
        "ha-readers",
        namesrv,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        poll_namesrv_interval_ms=300,
        heartbeat_interval_ms=500,
        auto_commit_interval_ms=200,
        suspend_ms=500,
        pull_batch_size=8,
    )


def poll_until(c: PullConsumer, got: list[MessageExt], count: int, timeout: float = 30) -> None:
    def enough() -> bool:
        got.extend(c.poll(timeout=0.3))
        return len(got) >= count

    wait_for(enough, timeout, f"{count} messages")


def offsets(addr: str) -> list[int]:
    replies = [status(addr, QueryConsumerOffsetRequest("ha-readers", TOPIC, q)) for q in range(2)]
    return [r.offset if isinstance(r, OffsetReply) else -1 for r in replies]


def test_consumers_continue_on_the_slave_and_resume_on_the_master(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        create_topic(pair.namesrv, TOPIC, 2)

        def slave_has_topic() -> bool:
            reply = status(pair.slave.broker_addr, GetAllTopicConfigRequest())
            assert isinstance(reply, TopicConfigListReply)
            return any(t.topic_name == TOPIC for t in reply.topics)

        wait_for(slave_has_topic, 10, "the topic synced to the slave")
        with Producer("ha-read-p", pair.namesrv) as producer:
            producer.send_batch([Message(TOPIC, f"m-{i}".encode()) for i in range(100)])
        pair.wait_in_sync()

        got: list[MessageExt] = []
        c = consumer(pair.namesrv)
        c.start()
        try:
            c.subscribe(TOPIC)
            poll_until(c, got, 40)
            c.commit()
            pair.stop_master()  # leaves the route
            wait_for(lambda: broker_ids(pair.namesrv) == {1}, 10, "the master gone")
            poll_until(c, got, 100)  # the rest from the slave
            c.commit()  # to the slave
            pair.start_master()
            wait_for(lambda: broker_ids(pair.namesrv) == {0, 1}, 20, "the master back")
            with Producer("ha-read-p2", pair.namesrv) as producer:
                producer.send_batch([Message(TOPIC, f"n-{i}".encode()) for i in range(20)])
            poll_until(c, got, 120)  # new messages exist only on the master at first
            # the last commit, explicitly: shutdown's own commit only logs a failure, and one
            # sent while the consumer's connection to the restarted master is still coming back
            # may time out; an application retries, so does this test, and says what failed
            failures: list[str] = []

            def committed() -> bool:
                try:
                    c.commit()
                except FerryError as err:
                    failures.append(str(err))
                    return False
                return True

            wait_for(committed, 20, "the last commit to succeed")
            if failures:
                print(f"commits retried after: {failures}")
        finally:
            c.shutdown()
        bodies = [m.body for m in got]
        assert len(bodies) == len(set(bodies)) == 120

        # the commits made on the slave reached the master: a new member re-reads nothing.
        # Every one of the 120 messages was consumed and committed (to the master, or to the
        # slave, which hands them over at its next sync): wait for that end state. Agreement
        # alone once passed in CI while the last batch's commit was on neither broker (not
        # reproduced locally; a commit timing out during the master's reconnect may land later)
        seen: list[tuple[list[int], list[int]]] = []

        def master_offsets_synced() -> bool:
            seen[:] = [(offsets(pair.master.broker_addr), offsets(pair.slave.broker_addr))]
            on_master, on_slave = seen[0]
            return sum(on_master) == 120 and on_master == on_slave

        try:
            wait_for(master_offsets_synced, 20, "all 120 commits on the master and the slave")
        except BaseException:
            print(f"last seen (master, slave) offsets: {seen}")
            raise
        with Producer("ha-read-p3", pair.namesrv) as producer:
            producer.send_batch([Message(TOPIC, f"o-{i}".encode()) for i in range(10)])
        later: list[MessageExt] = []
        with consumer(pair.namesrv) as again:
            again.subscribe(TOPIC)
            poll_until(again, later, 10)
            later.extend(again.poll(timeout=1.0))
        assert sorted(m.body for m in later) == sorted(f"o-{i}".encode() for i in range(10))
    finally:
        pair.close()
