"""deploy/docker-compose.yml for real: each broker service in its own container, clients on the
host reaching them through the published ports, data on named volumes surviving a kill -9 of
the store container and a compose down + up."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from itest_support import wait_for

from ferry.client import (
    Admin,
    ConsumeFromWhere,
    FerryError,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    SendStatus,
)

if TYPE_CHECKING:
    from conftest import ComposeStack

pytestmark = pytest.mark.e2e


def consume_all(namesrv: str, group: str, topic: str, want: set[bytes]) -> list[MessageExt]:
    """Polls a new group from the first offset until every body in `want` has arrived."""
    got: list[MessageExt] = []
    with PullConsumer(group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(topic, "*")

        def arrived() -> bool:
            got.extend(consumer.poll(timeout=1.0))
            return want <= {m.body for m in got}

        wait_for(arrived, timeout=60, what=f"{len(want)} messages of {topic}")
        consumer.commit()
    return got


class SteadyLoad:
    """One producer sending numbered messages back to back, noting which were acknowledged."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.acked: list[bytes] = []
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="steady-load", daemon=True)

    def _run(self) -> None:
        with Producer("e2e-load", self.namesrv, send_timeout_ms=2000, retry_times=0) as producer:
            seq = 0
            while not self.stop.is_set():
                body = f"load-{seq}".encode()
                seq += 1
                try:
                    result = producer.send(Message(self.topic, body))
                except FerryError:
                    self.failures += 1
                    self.stop.wait(0.05)  # back off while the broker is down
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(body)

    def __enter__(self) -> SteadyLoad:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_host_clients_reach_the_broker_through_the_published_ports(running: ComposeStack) -> None:
    bodies = [f"hello-{i}".encode() for i in range(50)]
    with Producer("e2e-hello", running.namesrv) as producer:
        first = producer.send(Message("E2EHello", bodies[0], tags="A", keys=["order-e2e"]))
        producer.send_batch([Message("E2EHello", b, tags="B") for b in bodies[1:]])
    assert first.status is SendStatus.SEND_OK

    with Admin(running.namesrv) as admin:
        route = admin.topic_route("E2EHello")
    # The broker advertises BROKER_IP1:BROKER_PORT, not its container address.
    assert [b.broker_addrs for b in route.broker_datas] == [{0: running.broker_addr}]

    got = consume_all(running.namesrv, "e2e-hello-reader", "E2EHello", set(bodies))
    assert sorted(m.body for m in got) == sorted(bodies)
    assert {m.tags for m in got if m.body == bodies[0]} == {"A"}

    # the index container follows the store container's feed: queries by key work too
    with Admin(running.namesrv) as admin:
        found = wait_for(
            lambda: admin.query_msg_by_key("E2EHello", "order-e2e"),
            timeout=30,
            what="the key in the index container",
        )
    assert [m.body for m in found] == [bodies[0]]


def test_acknowledged_messages_survive_kill_9_of_the_store_container(
    running: ComposeStack,
) -> None:
    with SteadyLoad(running.namesrv, "E2ECrash") as load:
        wait_for(lambda: len(load.acked) >= 100, timeout=60, what="100 acknowledged sends")
        running.kill("broker-store")  # SIGKILL: no flush, no clean stop
        failures = load.failures
        wait_for(lambda: load.failures > failures, timeout=30, what="sends failing")
        acked_while_down = len(load.acked)
        running.start("broker-store")
        wait_for(
            lambda: len(load.acked) >= acked_while_down + 50,
            timeout=60,
            what="sends acknowledged again after the store restarted",
        )
    assert "did not stop cleanly: recovered" in running.logs("broker-store")

    got = consume_all(running.namesrv, "e2e-crash-reader", "E2ECrash", set(load.acked))
    assert set(load.acked) <= {m.body for m in got}


def test_topics_offsets_and_messages_survive_compose_down_and_up(running: ComposeStack) -> None:
    bodies = {f"kept-{i}".encode() for i in range(30)}
    with Admin(running.namesrv) as admin:
        admin.create_topic("E2EKept", 3, 3)
    with Producer("e2e-kept", running.namesrv) as producer:
        for body in sorted(bodies):
            assert producer.send(Message("E2EKept", body)).status is SendStatus.SEND_OK
    consume_all(running.namesrv, "e2e-kept-reader", "E2EKept", bodies)  # commits its offsets

    running.down(volumes=False)
    assert running.containers() == {}
    running.up()

    with Admin(running.namesrv) as admin:
        route = wait_for(lambda: _route_or_none(admin, "E2EKept"), 30, "the route of E2EKept")
        queues = admin.queues("E2EKept")
        committed = sum(admin.consumer_offset("e2e-kept-reader", q) or 0 for q in queues)
    assert [q.read_queue_nums for q in route.queue_datas] == [3]  # topic config kept
    assert committed == len(bodies)  # consumer offsets kept
    got = consume_all(running.namesrv, "e2e-kept-late-reader", "E2EKept", bodies)
    assert sorted(m.body for m in got) == sorted(bodies)  # messages kept


def _route_or_none(admin: Admin, topic: str) -> object:
    try:
        return admin.topic_route(topic)
    except FerryError:
        return None
