"""More of issue 40 through the broker's RocketMQ door: a transaction at the protocol level
(frames the test builds: the broker's CHECK_TRANSACTION_STATE comes down the producer's own
connection, and its END_TRANSACTION commits or rolls back), a group of the unchanged
`rocketmq` 0.4.4 client in `ferry admin consumerProgress` and on the console's group page, and
the broker's spans of a message that client sent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import OtlpSink, ReceivedSpan, wait_for
from rocketmq_client_support import (
    CONSUMER,
    QUEUES,
    RocketMQConsumer,
    committed_to_the_end,
    consumer_ids,
    new_topic,
    on_queue,
    probe_until_consumed,
    run_producer,
)

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RequestCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FERRY = str(Path(sys.executable).parent / "ferry")
REMOTING, STORE = "ferry-broker-remoting", "ferry-broker-store"
COMMIT, ROLLBACK = 0x8, 0xC  # RocketMQ's commitOrRollback values
# half messages are checked 1 s after they were stored, every 0.3 s (RocketMQ: 6 s, 60 s)
CHECKS = {"transactionTimeOut": "1000", "transactionCheckInterval": "300"}


@pytest.fixture(scope="module")
def venv_python() -> Path:
    return rocketmq_remoting_python()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[LocalCluster]:
    """The door, the console, and the services' spans to `sink` (OTEL_* set: not the
    console's receiver)."""
    root = tmp_path_factory.mktemp("rocketmq-door-more")
    local = start_local_cluster(
        str(root), rocketmq_port=0, console_port=0, overrides=CHECKS, env=sink.env()
    )
    try:
        assert local.broker_rocketmq_addr and local.console_url
        with Admin(local.namesrv_addr) as admin:  # READY comes before the registration
            wait_for(lambda: bool(admin.master_addrs()), 15, "the broker to register")
        yield local
    finally:
        local.stop()


def read_all(namesrv: str, topic: str, until: Callable[[list[MessageExt]], bool]) -> list[bytes]:
    """Every body of topic with Ferry's SDK from the first offset (a new group each time),
    once `until` holds, then half a second more (a second delivery would come by then)."""
    group = f"cg-read-{topic}-{time.time_ns()}"
    with PullConsumer(group, namesrv, ConsumeFromWhere.FIRST_OFFSET) as reader:
        reader.subscribe(topic)
        got: list[MessageExt] = []
        wait_for(lambda: bool(got.extend(reader.poll(0.3)) or until(got)), 20, f"{topic} read")
        stop = time.monotonic() + 0.5
        while time.monotonic() < stop:
            got.extend(reader.poll(0.1))
    return [m.body for m in got]


# ---- §4 transactions at the protocol level ----


def props(**items: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in items.items())


def half_send(topic: str, group: str, key: str) -> dict[str, str]:
    """SEND_MESSAGE's header for a half message, as Java's transaction producer sends it."""
    return {
        "producerGroup": group,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": str(record.SYSFLAG_TX_PREPARED),
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": props(TRAN_MSG="true", PGROUP=group, UNIQ_KEY=key, WAIT="true"),
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }


def heartbeat(client_id: str, group: str) -> bytes:
    beat = {"clientID": client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    return json.dumps(beat).encode()


def next_check(client: RemotingClient, key: str, timeout_s: float) -> RemotingCommand:
    """The next CHECK_TRANSACTION_STATE the broker sends on this connection for key."""
    deadline = time.monotonic() + timeout_s
    while True:
        while client.requests_in:
            cmd = client.requests_in.pop(0)
            if cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.ext_fields["msgId"] == key:
                return cmd
        left = deadline - time.monotonic()
        assert left > 0, f"no CHECK_TRANSACTION_STATE for {key} within {timeout_s} s"
        cmd = client.receive(left)
        if cmd is not None and not cmd.is_response:
            client.requests_in.append(cmd)


def checks_for(client: RemotingClient, key: str, within_s: float) -> int:
    """How many CHECK_TRANSACTION_STATE for key come on this connection within within_s."""
    stop = time.monotonic() + within_s
    while (left := stop - time.monotonic()) > 0:
        cmd = client.receive(left)
        if cmd is not None and not cmd.is_response:
            client.requests_in.append(cmd)
    return sum(
        c.code == RequestCode.CHECK_TRANSACTION_STATE and c.ext_fields.get("msgId") == key
        for c in client.requests_in
    )


@pytest.mark.parametrize("resolution", [COMMIT, ROLLBACK], ids=["commit", "rollback"])
def test_the_broker_checks_a_half_message_on_the_producer_s_connection_and_its_answer_ends_it(
    cluster: LocalCluster, resolution: int
) -> None:
    name = "commit" if resolution == COMMIT else "rollback"
    topic = new_topic(cluster, f"DoorTx{name.title()}", queues=1)
    group = f"PG_DOOR_TX_{name.upper()}"
    key = f"0A0000010000{time.time_ns() & 0xFFFFFFFF:08X}{resolution:012X}"
    with RemotingClient(cluster.broker_rocketmq_addr) as producer:
        beat = producer.call(RequestCode.HEART_BEAT, body=heartbeat(f"127.0.0.1@tx-{name}", group))
        assert beat.code == ResponseCode.SUCCESS, beat.remark
        sent = producer.call(RequestCode.SEND_MESSAGE, half_send(topic, group, key), b"half body")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert sent.ext_fields["transactionId"] == key
        # the producer answers nothing: after transactionTimeOut the broker asks it
        check = next_check(producer, key, 20)
        assert check.flag & ONEWAY_FLAG  # the answer is an END_TRANSACTION of its own
        fields = check.ext_fields
        assert fields["msgId"] == key and fields["transactionId"] == key
        assert all(isinstance(v, str) for v in fields.values())  # the C++ client reads strings
        # the half message as the producer sent it (its real topic and queue, as RocketMQ's
        # broker sends it: Java's listener gets it as it was sent), otherwise as stored
        (half,) = record.iter_records(check.body)
        assert half.body == b"half body" and half.topic == topic and half.queue_id == 0
        assert half.properties["REAL_TOPIC"] == topic
        assert record.verify_crc(check.body, 0, half.total_size)
        assert half.properties["UNIQ_KEY"] == key and half.properties["PGROUP"] == group
        assert half.sysflag & record.SYSFLAG_TX_PREPARED
        # the offsets name the half message of the body (a fresh copy of the one sent, once
        # it has been checked: RocketMQ does the same), which END_TRANSACTION gives back
        assert int(fields["commitLogOffset"]) == half.phys_offset
        assert int(fields["tranStateTableOffset"]) == half.queue_offset
        assert fields["offsetMsgId"] == record.offset_msg_id(half.store_host, half.phys_offset)
        end = {
            "producerGroup": group,
            "tranStateTableOffset": fields["tranStateTableOffset"],
            "commitLogOffset": fields["commitLogOffset"],
            "commitOrRollback": str(resolution),
            "fromTransactionCheck": "true",
            "msgId": key,
            "transactionId": fields["transactionId"],
        }
        # Java's producer sends it oneway; it is served all the same
        producer.send(RequestCode.END_TRANSACTION, end, flag=ONEWAY_FLAG)
        if resolution == COMMIT:
            bodies = read_all(cluster.namesrv_addr, topic, lambda got: len(got) >= 1)
            assert bodies == [b"half body"]  # exactly once
        else:
            # a message sent after the rollback: once it is read, the rollback was served
            after = producer.call(
                RequestCode.SEND_MESSAGE,
                {**half_send(topic, group, key + "A"), "sysFlag": "0", "properties": ""},
                b"after",
            )
            assert after.code == ResponseCode.SUCCESS, after.remark
            bodies = read_all(cluster.namesrv_addr, topic, lambda got: len(got) >= 1)
            assert bodies == [b"after"]
        # ended: no more checks of it (they came every 0.3 s), and it never shows up later
        producer.requests_in.clear()
        assert checks_for(producer, key, 2.0) == 0
    later = read_all(cluster.namesrv_addr, topic, lambda got: len(got) >= 1)
    assert later == ([b"half body"] if resolution == COMMIT else [b"after"])


# ---- §3 a RocketMQ group's progress ----


@pytest.fixture
def consumer(
    venv_python: Path, cluster: LocalCluster, tmp_path: Path
) -> Iterator[Callable[[str, str], RocketMQConsumer]]:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    made: list[RocketMQConsumer] = []

    def make(group: str, topic: str) -> RocketMQConsumer:
        home = tmp_path / f"home-{len(made)}"
        home.mkdir()
        c = RocketMQConsumer(venv_python, script, cluster.rocketmq_addr, group, topic, home=home)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


def admin_cli(cluster: LocalCluster, *args: str) -> str:
    done = subprocess.run(
        [FERRY, "admin", *args, "-n", cluster.namesrv_addr],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_rocketmq_group_s_committed_offsets_show_in_consumer_progress_and_the_console(
    cluster: LocalCluster, consumer: Callable[[str, str], RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqProgress")
    group = "cg-rmq-progress"
    member = consumer(group, topic)
    with Producer("pg-rmq-progress", cluster.namesrv_addr) as producer:
        probe_until_consumed(producer, topic, [member])
        for i in range(12):
            producer.send(Message(topic, f"work-{i}"), on_queue, i % QUEUES)
    wanted = {f"work-{i}" for i in range(12)}
    wait_for(lambda: wanted <= set(member.bodies()), 30, "the work consumed")
    with RemotingClient(cluster.broker_rocketmq_addr) as door:
        # the client commits by UPDATE_CONSUMER_OFFSET every 5 s and with each pull
        wait_for(lambda: committed_to_the_end(door, group, topic), 30, "offsets committed")
        (client_id,) = consumer_ids(door, group)
    with Admin(cluster.namesrv_addr) as admin:
        stats = admin.topic_stats(topic)
    tops = {q.queue_id: q.max_offset for queues in stats.values() for q in queues}
    assert sorted(tops) == list(range(QUEUES)) and sum(tops.values()) >= 12 + QUEUES

    rows = json.loads(admin_cli(cluster, "consumerProgress", "-g", group, "--json"))
    # the client subscribes to its retry topic too (as RocketMQ's consumers do): shown, empty
    assert {r["topic"] for r in rows} == {topic, f"%RETRY%{group}"}
    assert all(r["broker_offset"] == 0 for r in rows if r["topic"] != topic), rows
    mine = [r for r in rows if r["topic"] == topic]
    assert sorted(r["queue"] for r in mine) == list(range(QUEUES))
    for r in mine:
        assert r["consumer_offset"] == r["broker_offset"] == tops[r["queue"]], r
        assert r["lag"] == 0, r
    table = admin_cli(cluster, "consumerProgress")
    line = next(ln for ln in table.splitlines() if ln.startswith(group))
    assert line.split()[-1] == "0"  # the group's total lag, last on its line

    url = f"{cluster.console_url}/group/{urllib.parse.quote(group, safe='')}"

    def group_page() -> str | None:
        with urllib.request.urlopen(url, timeout=30) as reply:
            page: str = reply.read().decode()
        # the console learns a group's topics from its sampler (every 10 s by default)
        return page if f"<h2>{topic}</h2>" in page else None

    page = wait_for(group_page, 30, "the group's topic on the console's group page")
    assert f'<span id="group-name">{group}</span>' in page
    assert '<strong id="group-lag">0</strong>' in page
    assert f"<li>{client_id}</li>" in page  # the live member, from the heartbeat table
    for q, top in tops.items():  # queue, broker offset, consumer offset, lag
        cells = (
            f'<td class="num">{q}</td><td class="num">{top}</td>\n'
            f'<td class="num">{top}</td>\n<td class="num">0</td>'
        )
        assert cells in page, cells


# ---- §3 the broker's spans of a RocketMQ producer's message ----


def test_a_rocketmq_producer_s_message_gets_the_broker_s_send_and_store_spans(
    cluster: LocalCluster, sink: OtlpSink, venv_python: Path, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "RmqTraced")
    spec = {
        "namesrv": cluster.rocketmq_addr,
        "topic": topic,
        "messages": [{"mark": "m", "body": "traced by the broker", "tags": "TagT"}],
    }
    (sent,) = run_producer(venv_python, tmp_path, spec)
    assert sent.get("status") == 0, sent
    msg_id = sent["msg_id"]  # the client's UNIQ_KEY

    def spans_of_it() -> tuple[ReceivedSpan, ReceivedSpan] | None:
        spans = sink.snapshot()
        send = next(
            (
                s
                for s in spans
                if (s.service, s.name) == (REMOTING, f"send {topic}")
                and s.attributes.get("messaging.message.id") == msg_id
            ),
            None,
        )
        if send is None:
            return None
        store = next(
            (
                s
                for s in spans
                if (s.service, s.name) == (STORE, "store append")
                and s.parent_span_id == send.span_id
            ),
            None,
        )
        return (send, store) if store is not None else None

    send, store = wait_for(spans_of_it, 30, f"the broker's spans of {msg_id}")
    assert send.attributes["messaging.system"] == "rocketmq"
    assert send.attributes["messaging.destination.name"] == topic
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.partition.id"] in {str(q) for q in range(QUEUES)}
    # the C++ client puts no trace context on its messages, and the door hands the handlers
    # none: the broker's send span starts the message's trace
    assert send.parent_span_id == ""
    assert store.trace_id == send.trace_id
    assert store.attributes["messaging.batch.message_count"] == 1
