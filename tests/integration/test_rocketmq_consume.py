"""RocketMQ's own push consumer (`rocketmq` 0.4.4, rocketmq-client-cpp inside), unchanged, in
its own venv, against Ferry's doors: messages sent with Ferry's SDK reach it intact, tag
expressions filter, a group's members split the queues, a failed message comes back through
the retry topic, and a restarted group resumes from its committed offset (issue 40 §3)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import Message, MessageQueue, Producer
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration

QUEUES = 4

# The consumer program, run with the venv's python: one JSON line per message, "started"
# once start() returned; it shuts down when its stdin closes. A message whose keys are in
# argv[5] (comma separated) fails its first delivery (the wrapper reports an exception in the
# listener as RECONSUME_LATER).
CONSUMER = r"""
import json, sys, threading
from rocketmq.client import PushConsumer

namesrv, group, topic, expression, fail_keys = sys.argv[1:6]
fail = set(filter(None, fail_keys.split(",")))
failed = set()
lock = threading.Lock()


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def on_message(msg):
    rec = {
        "id": text(msg.id),
        "topic": text(msg.topic),
        "tags": text(msg.tags),
        "keys": text(msg.keys),
        "body": text(msg.body),
        "user": text(msg.get_property("user")),
        "reconsume_times": msg.reconsume_times,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "born_timestamp": msg.born_timestamp,
    }
    with lock:
        first = rec["keys"] in fail and rec["keys"] not in failed
        failed.add(rec["keys"])
    rec["failed"] = first
    out(rec)
    if first:
        raise RuntimeError("fails its first delivery")


consumer = PushConsumer(group)
consumer.set_namesrv_addr(namesrv)
consumer.subscribe(topic, on_message, expression)
consumer.start()
out({"started": True})
sys.stdin.read()
consumer.shutdown()
out({"stopped": True})
"""


@pytest.fixture(scope="module")
def venv_python() -> Path:
    return rocketmq_remoting_python()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("rocketmq-consume")
    # short delay levels: a retry (level 3 + reconsume times) comes back within a second
    local = start_local_cluster(
        str(root), rocketmq_port=0, overrides={"messageDelayLevel": "1s 1s 1s 1s 1s"}
    )
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer("pg-rocketmq-consume", cluster.namesrv_addr) as p:
        yield p


class RocketMQConsumer:
    """The consumer program as a child process; its lines are gathered by a thread."""

    def __init__(
        self, python: Path, script: Path, addr: str, group: str, topic: str, expression: str = "*"
    ) -> None:
        self.fail_keys: list[str] = []
        self._args = [str(python), str(script), addr, group, topic, expression]
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.messages: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> RocketMQConsumer:
        self.proc = subprocess.Popen(
            [*self._args, ",".join(self.fail_keys)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_line(lambda line: bool(line.get("started")), 30)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = json.loads(raw)
            if "body" in line:
                self.messages.append(line)
            self.lines.put(line)

    def wait_line(self, wanted: Callable[[dict[str, Any]], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such line within {timeout_s} s") from None
            if wanted(line):
                return

    def bodies(self) -> list[str]:
        return [m["body"] for m in list(self.messages)]

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None or proc.stdout.closed:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)  # it ends at the end of the output
        proc.stdout.close()


@pytest.fixture
def consumers(
    venv_python: Path, cluster: LocalCluster, tmp_path: Path
) -> Iterator[Callable[..., RocketMQConsumer]]:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    made: list[RocketMQConsumer] = []

    def make(group: str, topic: str, expression: str = "*") -> RocketMQConsumer:
        c = RocketMQConsumer(venv_python, script, cluster.rocketmq_addr, group, topic, expression)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def new_topic(cluster: LocalCluster, name: str) -> str:
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(name, QUEUES, QUEUES)
    return name


def on_queue(queues: list[MessageQueue], _msg: Message, queue_id: int) -> MessageQueue:
    return next(q for q in queues if q.queue_id == queue_id)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def probe_until_consumed(
    producer: Producer, topic: str, members: list[RocketMQConsumer], timeout_s: float = 30
) -> None:
    """A new group starts at the end of each queue (QUERY_CONSUMER_OFFSET answered 22): probes
    go to every queue until each member has consumed one sent after it started pulling."""
    deadline = time.monotonic() + timeout_s
    n = 0
    while True:
        for queue_id in range(QUEUES):
            producer.send(Message(topic, f"probe-{n}", tags="probe"), on_queue, queue_id)
            n += 1
        stop = time.monotonic() + 1.0
        while time.monotonic() < stop:
            if all(any(b.startswith("probe-") for b in c.bodies()) for c in members):
                return
            time.sleep(0.05)
        assert time.monotonic() < deadline, "the consumers consumed no probe"


def test_messages_sent_with_ferrys_sdk_reach_a_rocketmq_push_consumer_intact(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqIntact")
    consumer = consumers("cg-rmq-intact", topic).start()
    probe_until_consumed(producer, topic, [consumer])
    sent = {}
    for i in range(8):
        msg = Message(
            topic, f"intact-{i}", tags="TagA", keys=[f"key-{i}"], properties={"user": f"u{i}"}
        )
        sent[f"intact-{i}"] = producer.send(msg)
    wait_for(
        lambda: set(sent) <= set(consumer.bodies()), 30, "the SDK's messages were not consumed"
    )
    got = {m["body"]: m for m in consumer.messages if m["body"] in sent}
    for body, result in sent.items():
        m = got[body]
        n = body.split("-")[1]
        assert m["topic"] == topic
        assert m["tags"] == "TagA"
        assert m["keys"] == f"key-{n}"
        assert m["user"] == f"u{n}"
        assert m["id"] == result.msg_id
        assert m["queue_id"] == result.queue.queue_id
        assert m["queue_offset"] == result.queue_offset
        assert m["reconsume_times"] == 0
        assert abs(m["born_timestamp"] - time.time() * 1000) < 120_000


def test_a_tag_expression_lets_through_only_its_tags(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqTags")
    consumer = consumers("cg-rmq-tags", topic, "TagA || TagB").start()
    # probes must pass the filter here
    deadline = time.monotonic() + 30
    while not any(b.startswith("tprobe") for b in consumer.bodies()):
        assert time.monotonic() < deadline, "no probe consumed"
        for q in range(QUEUES):
            producer.send(Message(topic, f"tprobe-{q}", tags="TagA"), on_queue, q)
        time.sleep(0.5)
    for q in range(QUEUES):
        producer.send(Message(topic, f"a-{q}", tags="TagA"), on_queue, q)
        producer.send(Message(topic, f"c-{q}", tags="TagC"), on_queue, q)
        producer.send(Message(topic, f"b-{q}", tags="TagB"), on_queue, q)
    wanted = {f"{t}-{q}" for t in "ab" for q in range(QUEUES)}
    wait_for(lambda: wanted <= set(consumer.bodies()), 30, "TagA/TagB messages missing")
    time.sleep(1.0)  # a TagC message would have come with the TagB one after it
    assert not [b for b in consumer.bodies() if b.startswith("c-")]


def test_two_consumers_of_one_group_split_the_queues_and_consume_each_message_once(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqSplit")
    group = "cg-rmq-split"
    first = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [first])
    second = consumers(group, topic).start()
    with RemotingClient(cluster.broker_rocketmq_addr) as door:

        def members() -> list[str]:
            got = door.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
            return list(json.loads(got.body)["consumerIdList"]) if got.code == 0 else []

        wait_for(lambda: len(members()) == 2, 30, "the second member never registered")
    probe_until_consumed(producer, topic, [first, second])
    # the rebalance has settled once both consume: from here each message goes to one
    first.messages.clear()
    second.messages.clear()
    bodies = [f"split-{i}" for i in range(40)]
    for i, body in enumerate(bodies):
        producer.send(Message(topic, body, tags="s"), on_queue, i % QUEUES)
    wanted = set(bodies)

    def got() -> list[str]:
        return [b for c in (first, second) for b in c.bodies() if b in wanted]

    wait_for(lambda: set(got()) == wanted, 30, "split messages missing")
    time.sleep(0.5)  # a second delivery would follow close behind
    assert sorted(got()) == sorted(bodies)  # each once
    in_first = {m["queue_id"] for m in first.messages if m["body"] in wanted}
    in_second = {m["queue_id"] for m in second.messages if m["body"] in wanted}
    assert in_first and in_second and not in_first & in_second
    assert in_first | in_second == set(range(QUEUES))


def test_a_failed_message_comes_back_through_the_retry_topic_with_reconsume_times_1(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqRetry")
    consumer = consumers("cg-rmq-retry", topic)
    consumer.fail_keys = ["poison"]
    consumer.start()
    probe_until_consumed(producer, topic, [consumer])
    result = producer.send(Message(topic, "poison-body", tags="TagA", keys=["poison"]))

    def deliveries() -> list[dict[str, Any]]:
        return [m for m in list(consumer.messages) if m["body"] == "poison-body"]

    wait_for(lambda: len(deliveries()) >= 2, 40, "the failed message did not come back")
    first, again = deliveries()[:2]
    assert first["failed"] and first["reconsume_times"] == 0
    assert not again["failed"]
    assert again["reconsume_times"] == 1
    assert again["id"] == result.msg_id
    assert again["keys"] == "poison" and again["tags"] == "TagA"
    assert again["topic"] == topic  # the client restores the original topic


def test_a_restarted_group_resumes_from_its_committed_offsets(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqResume")
    group = "cg-rmq-resume"
    consumer = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [consumer])
    before = [f"before-{i}" for i in range(8)]
    for i, body in enumerate(before):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    wait_for(lambda: set(before) <= set(consumer.bodies()), 30, "first messages missing")
    with RemotingClient(cluster.broker_rocketmq_addr) as door:

        def committed_to_the_end() -> bool:
            for q in range(QUEUES):
                fields = {"consumerGroup": group, "topic": topic, "queueId": str(q)}
                got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
                top = door.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
                if (
                    got.code != ResponseCode.SUCCESS
                    or got.ext_fields["offset"] != top.ext_fields["offset"]
                ):
                    return False
            return True

        # offsets are committed every 5 s and with each pull
        wait_for(committed_to_the_end, 30, "the consumer never committed its offsets")
    consumer.stop()
    after = [f"after-{i}" for i in range(8)]
    for i, body in enumerate(after):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    again = consumers(group, topic).start()
    wait_for(lambda: set(after) <= set(again.bodies()), 30, "the restarted group missed some")
    assert not set(before) & set(again.bodies())
