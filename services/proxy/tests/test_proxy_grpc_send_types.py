"""FIFO, delayed and transactional sends of RocketMQ 5's unchanged Python client through the
proxy: one message group stays on one queue in its order, a delayed message comes at its time
and not before, bad delivery times get ILLEGAL_DELIVERY_TIME, transactions commit, roll back,
and an orphaned one is checked through the producer's Telemetry stream and resolved by its
TransactionChecker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, MessageExt, PullConsumer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_programs import RunningClient
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

ClientRunner = Callable[..., str]
ProxyProcess = Any

FIFO_TOPIC = "ProxyFifo"
DELAY_TOPIC = "ProxyDelay"
TX_TOPIC = "ProxyTx"
GROUPS = ("group-a", "group-b", "group-c")
PER_GROUP = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """conftest's cluster, with half messages checked 1 s after they are stored."""
    local = start_local_cluster(
        str(tmp_path_factory.mktemp("proxy-types-cluster")),
        overrides={
            "enablePropertyFilter": "true",
            "transactionTimeOut": "1000",
            "transactionCheckInterval": "300",
        },
    )
    try:
        with Admin(local.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            for topic in (FIFO_TOPIC, DELAY_TOPIC, TX_TOPIC):
                admin.create_topic(topic, 4, 4)
        yield local
    finally:
        local.stop()


class Reader:
    """Ferry's own PullConsumer on a topic from its first offset, what it got kept."""

    def __init__(self, cluster: LocalCluster, topic: str, group: str) -> None:
        self.got: list[MessageExt] = []
        self.arrived: dict[str, float] = {}  # body -> when it was first polled
        self._consumer = PullConsumer(
            group, cluster.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
        )
        self._consumer.subscribe(topic)
        self._consumer.start()

    def poll(self) -> list[MessageExt]:
        new = self._consumer.poll(timeout=0.5)
        for msg in new:
            self.arrived.setdefault(msg.body.decode(), time.time())
        self.got.extend(new)
        return new

    def bodies(self) -> set[str]:
        return {m.body.decode() for m in self.got}

    def until(self, bodies: set[str], seconds: float, what: str) -> None:
        def arrived() -> bool:
            self.poll()
            return bodies <= self.bodies()

        wait_for(arrived, seconds, what)

    def close(self) -> None:
        self._consumer.shutdown()


# ---- FIFO ----

# argv: endpoint, topic, groups (comma separated), per group; the groups interleaved
SEND_FIFO = r"""
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, groups, per_group = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
groups = groups.split(",")
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
try:
    for seq in range(per_group):
        for group in groups:
            msg = Message()
            msg.topic = topic
            msg.body = f"{group}:{seq}".encode()
            msg.message_group = group
            receipt = producer.send(msg)
            print(json.dumps({"group": group, "seq": seq, "id": receipt.message_id}), flush=True)
finally:
    producer.shutdown()
"""

# argv: endpoint, topic, consumer group, count; every message's body and message group
RECEIVE = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: FilterExpression()}, await_duration=2)
consumer.startup()
got, end = {}, time.monotonic() + 60
try:
    while len(got) < count and time.monotonic() < end:
        for m in consumer.receive(32, 30):
            got[m.body.decode()] = [m.message_group, int(m.message_type)]
            consumer.ack(m)
finally:
    consumer.shutdown()
print(json.dumps(got))
"""


@pytest.mark.timeout(300)
def test_fifo_groups_each_stay_on_one_queue_in_their_order(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    out = client(SEND_FIFO, proxy.addr, FIFO_TOPIC, ",".join(GROUPS), str(PER_GROUP))
    sent = [json.loads(line) for line in out.splitlines()]
    assert len(sent) == len(GROUPS) * PER_GROUP

    reader = Reader(cluster, FIFO_TOPIC, "cg-proxy-fifo")
    try:
        every = {f"{g}:{i}" for g in GROUPS for i in range(PER_GROUP)}
        reader.until(every, 30, "the FIFO messages sent through the proxy")
    finally:
        reader.close()
    by_group: dict[str, list[MessageExt]] = {g: [] for g in GROUPS}
    for msg in reader.got:
        by_group[msg.properties["__SHARDINGKEY"]].append(msg)
    for group, msgs in by_group.items():
        queues = {(m.broker_name, m.queue_id) for m in msgs}
        assert len(queues) == 1, f"{group} is spread over {queues}"
        stored = sorted(msgs, key=lambda m: m.queue_offset)
        assert [m.body.decode() for m in stored] == [f"{group}:{i}" for i in range(PER_GROUP)]
        ids = [s["id"] for s in sent if s["group"] == group]
        assert [m.properties["UNIQ_KEY"] for m in stored] == ids

    # a gRPC consumer gets each message's group back, as a FIFO message (type 2)
    got = json.loads(client(RECEIVE, proxy.addr, FIFO_TOPIC, "cg-proxy-fifo-grpc", "60"))
    assert len(got) == len(GROUPS) * PER_GROUP
    for body, (group, kind) in got.items():
        assert (group, kind) == (body.split(":")[0], 2)


# ---- delayed ----

# argv: endpoint, topic, delay s; prints the delivery time it asked for, then the Code each
# bad delivery time got
SEND_DELAYED = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, delay = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()

def delayed(body, when):
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    msg.delivery_timestamp = when  # seconds: the client puts them in Timestamp.seconds as given
    return msg

try:
    due = int(time.time()) + delay
    receipt = producer.send(delayed("later", due))
    print(json.dumps({"due": due, "id": receipt.message_id}), flush=True)
    now = int(time.time())
    # negative; milliseconds where seconds belong; 10 days, past the broker's 3-day limit
    for name, when in (("negative", -5), ("millis", now * 1000), ("ten_days", now + 864000)):
        try:
            producer.send(delayed(name, when))
            print(json.dumps({"bad": name, "code": 20000}), flush=True)
        except Exception as e:
            print(json.dumps({"bad": name, "code": getattr(e, "code", None), "text": str(e)}),
                  flush=True)
finally:
    producer.shutdown()
"""


@pytest.mark.timeout(300)
def test_a_delayed_message_comes_at_its_time_and_bad_times_are_refused(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    reader = Reader(cluster, DELAY_TOPIC, "cg-proxy-delay")
    try:
        out = [
            json.loads(line)
            for line in client(SEND_DELAYED, proxy.addr, DELAY_TOPIC, "3").splitlines()
        ]
        due = out[0]["due"]
        # nothing before its time (the program's send and its bad sends took some of it)
        while time.time() < due - 0.5:
            reader.poll()
        assert reader.bodies() == set(), "a delayed message came before its time"
        reader.until({"later"}, 30, "the delayed message after its time")
        assert reader.arrived["later"] >= due - 0.5
        [msg] = reader.got
        assert msg.properties["UNIQ_KEY"] == out[0]["id"]
    finally:
        reader.close()
    bad = {line["bad"]: line for line in out[1:]}
    for name in ("negative", "millis", "ten_days"):
        assert bad[name]["code"] == 40012, bad[name]  # ILLEGAL_DELIVERY_TIME
    assert "timerMaxDelaySec" in bad["ten_days"]["text"]  # the broker's own limit
    assert proxy.proc.poll() is None


# ---- transactions ----

# argv: endpoint, topic, mode (commit | rollback | unknown); a JSON line per half sent and per
# check the TransactionChecker answered (COMMIT); runs until a line comes on stdin
TRANSACTIONS = r"""
import json, sys
from rocketmq import (ClientConfiguration, Credentials, Message, Producer, TransactionChecker,
                      TransactionResolution)
from rocketmq.grpc_protocol import TransactionSource
endpoint, topic, mode = sys.argv[1], sys.argv[2], sys.argv[3]

class Checker(TransactionChecker):
    def check(self, message):
        print(json.dumps({"checked": message.body.decode(), "id": message.message_id,
                          "props": dict(message.properties)}), flush=True)
        return TransactionResolution.COMMIT

producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,), Checker())
producer.startup()

def half(body):
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    msg.add_property("step", body)
    transaction = producer.begin_transaction()
    receipt = producer.send(msg, transaction)
    print(json.dumps({"sent": body, "id": receipt.message_id,
                      "transaction_id": receipt.transaction_id}), flush=True)
    return transaction, msg, receipt

try:
    if mode == "commit":
        half("committed")[0].commit()
    elif mode == "rollback":
        half("rolled-back")[0].rollback()
        half("after-rollback")[0].commit()
    else:
        # the local transaction's outcome is not known yet: the broker's check asks later
        _, msg, receipt = half("orphan")
        reply = producer.end_transaction(
            receipt.message_queue.endpoints, msg, receipt.transaction_id,
            TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
            TransactionSource.SOURCE_CLIENT)
        print(json.dumps({"unknown_end": reply.status.code}), flush=True)
    print("done", flush=True)
    sys.stdin.readline()
finally:
    producer.shutdown()
"""


@pytest.fixture
def tx_reader(cluster: LocalCluster) -> Iterator[Reader]:
    reader = Reader(cluster, TX_TOPIC, "cg-proxy-tx")
    try:
        yield reader
    finally:
        reader.close()


def _run_tx(home: Path, proxy: ProxyProcess, mode: str) -> RunningClient:
    running = RunningClient(home, TRANSACTIONS, proxy.addr, TX_TOPIC, mode)
    wait_for(lambda: "done" in running.lines or running.proc.poll() is not None, 60, mode)
    assert "done" in running.lines, f"the {mode} program failed: {running.lines}"
    return running


@pytest.mark.timeout(300)
def test_a_committed_transaction_is_delivered_and_a_rolled_back_one_never(
    proxy: ProxyProcess, home: Path, tx_reader: Reader
) -> None:
    running = _run_tx(home, proxy, "commit")
    try:
        tx_reader.until({"committed"}, 30, "the committed message")
    finally:
        assert running.stop() == 0
    sent = running.json_lines()[0]
    assert sent["transaction_id"].startswith("T1")
    [msg] = [m for m in tx_reader.got if m.body == b"committed"]
    assert msg.properties["UNIQ_KEY"] == sent["id"]
    assert msg.properties["step"] == "committed"

    running = _run_tx(home, proxy, "rollback")
    try:
        # the later commit is delivered; the message rolled back before it never is
        tx_reader.until({"after-rollback"}, 30, "the message committed after the rollback")
    finally:
        assert running.stop() == 0
    assert "rolled-back" not in tx_reader.bodies()
    assert not [line for line in running.json_lines() if "checked" in line]


@pytest.mark.timeout(300)
def test_an_unknown_transaction_is_checked_through_telemetry_and_committed(
    proxy: ProxyProcess, home: Path, tx_reader: Reader
) -> None:
    running = _run_tx(home, proxy, "unknown")
    try:
        tx_reader.until({"orphan"}, 60, "the orphan, committed by the client's checker")
    finally:
        assert running.stop() == 0
    lines = running.json_lines()
    sent = next(line for line in lines if "sent" in line)
    assert next(line for line in lines if "unknown_end" in line)["unknown_end"] == 20000
    checks = [line for line in lines if "checked" in line]
    assert checks, "the checker was never asked"
    assert checks[0]["checked"] == "orphan"
    assert checks[0]["id"] == sent["id"]  # the client's message id, as it sent it
    assert checks[0]["props"] == {"step": "orphan"}


# argv: endpoint, topic; the generated stub's EndTransaction with ids the proxy never gave
BAD_ENDS = r"""
import base64, json, sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic = sys.argv[1], sys.argv[2]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
meta = [("x-mq-client-id", "probe@1")]
forged = "T1" + base64.urlsafe_b64encode(b"broker-a\n0\n0\nmsg\ntx").decode().rstrip("=")
out = {}
for name, tx_id, on in (("garbled", "T1@@", topic), ("empty", "", topic),
                        ("forged", forged, topic), ("bad_topic", forged, "bad topic")):
    request = s.EndTransactionRequest(topic=d.Resource(name=on), message_id="msg",
                                      transaction_id=tx_id, resolution=d.COMMIT)
    reply = stub.EndTransaction(request, metadata=meta, timeout=10)
    out[name] = [reply.status.code, reply.status.message]
print(json.dumps(out))
"""


def test_end_transaction_with_an_id_the_proxy_never_gave_gets_a_status(
    proxy: ProxyProcess, client: ClientRunner
) -> None:
    got = json.loads(client(BAD_ENDS, proxy.addr, TX_TOPIC))
    assert got["garbled"][0] == 40008  # INVALID_TRANSACTION_ID
    assert got["empty"][0] == 40008
    assert got["forged"][0] == 40008, got["forged"]  # the broker holds no such half
    assert got["bad_topic"][0] == 40002  # ILLEGAL_TOPIC
    assert proxy.proc.poll() is None
