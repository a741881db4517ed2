"""deploy/docker-compose.yml for real: each broker service in its own container, clients on the
host reaching them through the published ports, data on named volumes surviving a kill -9 of
the store container and a compose down + up."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from e2e_support import SteadyLoad, consume_all
from itest_support import wait_for
from rocketmq_client_support import CONSUMER, RocketMQConsumer, probe_until_consumed, run_producer

from ferry.admin import Admin
from ferry.client import FerryError, Message, Producer, SendStatus
from ferry.protocol.rocketmq import RequestCode
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python, rocketmq_remoting_python
from ferry.runtime.testing.remoting_client import RemotingClient

if TYPE_CHECKING:
    from conftest import ComposeStack

# compose up waits on a chain of health checks: minutes on a loaded machine
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _page(url: str) -> str:
    """The page's HTML, or '' while the console cannot show it."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


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

    # the console container serves through its published port and finds the broker group
    # through the name server's container (the broker itself it reaches only when BROKER_IP1
    # is an address containers can reach: deploy/README.md)
    cluster_page = wait_for(
        lambda: _page(f"{running.console_url}/"),
        timeout=60,
        what="the console's cluster page",
    )
    assert running.broker_addr in cluster_page

    # Prometheus: broker-a's /metrics, published on METRICS_PORT, counts what came in
    def messages_in() -> bool:
        text = _page(running.metrics_url)
        return any(
            line.startswith("rocketmq_messages_in_total{")
            and 'topic="E2EHello"' in line
            and float(line.rsplit(" ", 1)[1]) >= len(bodies)
            for line in text.splitlines()
        )

    wait_for(messages_in, timeout=60, what="E2EHello's messages on the published /metrics")


def test_rocketmq_clients_on_the_host_use_the_published_rocketmq_ports(
    running: ComposeStack, tmp_path: Path
) -> None:
    # Apache's `rocketmq` 0.4.4 client, unchanged, given only NAMESRV_PORT (9876 by default)
    python = rocketmq_remoting_python()
    topic = "E2EDoor"
    with Admin(running.namesrv) as admin:
        admin.create_topic(topic, 4, 4)

    # the route over RocketMQ's protocol names the broker's published RocketMQ-protocol port
    def door_route() -> dict[str, str] | None:
        with RemotingClient(running.rocketmq_namesrv) as door:
            got = door.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return json.loads(got.body)["brokerDatas"][0]["brokerAddrs"] if got.code == 0 else None

    addrs = wait_for(door_route, timeout=30, what="the topic's route through the door")
    assert addrs == {"0": running.rocketmq_broker_addr}

    # a RocketMQ producer's messages reach Ferry's consumer, tags and keys intact
    spec = {
        "namesrv": running.rocketmq_namesrv,
        "group": "e2e-door-producer",
        "topic": topic,
        "messages": [
            {"mark": i, "body": f"rmq-{i}", "tags": "R", "keys": f"rk-{i}"} for i in range(10)
        ],
    }
    sent = run_producer(python, tmp_path / "producer", spec)
    assert [line.get("status") for line in sent] == [0] * 10, sent
    bodies = {f"rmq-{i}".encode() for i in range(10)}
    got = consume_all(running.namesrv, "e2e-door-ferry-reader", topic, bodies)
    by_body = {m.body: m for m in got if m.body in bodies}
    assert {m.tags for m in by_body.values()} == {"R"}
    assert {m.keys[0] for m in by_body.values()} == {f"rk-{i}" for i in range(10)}
    assert {m.msg_id for m in by_body.values()} == {line["msg_id"] for line in sent}

    # and a Ferry producer's messages reach a RocketMQ push consumer through the door
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    home = tmp_path / "consumer-home"
    home.mkdir()
    consumer = RocketMQConsumer(
        python, script, running.rocketmq_namesrv, "e2e-door-rmq", topic, home=home
    ).start()
    try:
        with Producer("e2e-door-ferry", running.namesrv) as producer:
            probe_until_consumed(producer, topic, [consumer], timeout_s=60)
            producer.send(Message(topic, b"from-ferry", tags="F", keys=["fk-1"]))
        consumer.wait_line(lambda line: line.get("body") == "from-ferry", 30)
    finally:
        consumer.stop()
    [delivered] = [m for m in consumer.messages if m["body"] == "from-ferry"]
    assert (delivered["tags"], delivered["keys"]) == ("F", "fk-1")


# RocketMQ 5's Python client: sends through the endpoint it is given; one JSON line per message
GRPC_SEND = r"""
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic = sys.argv[1], sys.argv[2]
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
try:
    for i in range(5):
        msg = Message()
        msg.topic = topic
        msg.body = f"grpc-{i}".encode()
        msg.tag = "G"
        msg.keys = f"gk-{i}"
        print(json.dumps({"id": producer.send(msg).message_id}), flush=True)
finally:
    producer.shutdown()
"""


def test_rocketmq_5_clients_on_the_host_send_through_the_published_proxy(
    running: ComposeStack, tmp_path: Path
) -> None:
    topic = "E2EProxy"
    with Admin(running.namesrv) as admin:
        admin.create_topic(topic, 4, 4)
    home = tmp_path / "home"
    home.mkdir()  # the client writes its log under ~/logs
    sent = subprocess.run(
        [str(rocketmq_grpc_python()), "-c", GRPC_SEND, running.proxy_endpoint, topic],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert sent.returncode == 0, sent.stdout + sent.stderr
    ids = {json.loads(line)["id"] for line in sent.stdout.splitlines() if line.startswith("{")}
    bodies = {f"grpc-{i}".encode() for i in range(5)}
    got = consume_all(running.namesrv, "e2e-proxy-reader", topic, bodies)
    assert {m.msg_id for m in got if m.body in bodies} == ids
    assert {m.tags for m in got if m.body in bodies} == {"G"}


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
