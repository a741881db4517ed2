"""Issue 40 §3, Producer: the unchanged `rocketmq` 0.4.4 client (rocketmq-client-cpp inside),
run from a venv of its own, sends through the broker's RocketMQ door; Ferry's own SDK and
`ferry admin` then find what it sent, intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, MessageExt, PullConsumer
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.layouts import start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.cluster import SMALL_STORE

pytestmark = pytest.mark.integration

FERRY = str(Path(sys.executable).parent / "ferry")
TOPIC = "RmqProduce"
QUEUES = 4

# Run with the client venv's python: argv[1] is the name server, argv[2] the topic. One JSON
# line per send: {"op", "status", "msg_id", "offset", "mark"}.
PRODUCER_SCRIPT = r"""
import json, sys, threading
from rocketmq.client import Message, Producer

namesrv, topic = sys.argv[1], sys.argv[2]
out = sys.stdout

def emit(op, mark, result=None, **more):
    line = {"op": op, "mark": mark, **more}
    if result is not None:
        line.update(status=int(result.status), msg_id=result.msg_id, offset=result.offset)
    out.write(json.dumps(line) + "\n")
    out.flush()

def message(mark, tags="TagA", delay=0, body=None):
    msg = Message(topic)
    msg.set_keys("key-" + mark)
    msg.set_tags(tags)
    msg.set_property("mark", mark)
    msg.set_property("color", "blue")
    if delay:
        msg.set_delay_time_level(delay)
    msg.set_body(body if body is not None else "body-" + mark)
    return msg

producer = Producer("PG_RMQ")
producer.set_namesrv_addr(namesrv)
producer.start()
try:
    for i in range(3):
        emit("sync", "s%d" % i, producer.send_sync(message("s%d" % i)))
    emit("sync", "delayed", producer.send_sync(message("delayed", tags="TagD", delay=1)))
    emit("sync", "big", producer.send_sync(message("big", body="z" * 5000)))
    done = threading.Event()
    got = {}
    def ok(result):
        got["result"] = result
        done.set()
    def failed(exc):
        got["error"] = str(exc)
        done.set()
    producer.send_async(message("async"), ok, failed)
    done.wait(20)
    if "result" in got:
        emit("async", "async", got["result"])
    else:
        emit("async", "async", error=got.get("error", "no callback within 20 s"))
    producer.send_oneway(message("oneway"))
    emit("oneway", "oneway")
    for arg in (1, 5, 2):
        emit("orderly", "o%d" % arg, producer.send_orderly(message("o%d" % arg), arg), arg=arg)
    batch = [message("b%d" % i, tags="TagB") for i in range(3)]
    emit("batch", "batch", producer.send_batch(batch))
finally:
    producer.shutdown()
"""


@dataclass
class Sent:
    local: LocalCluster
    lines: list[dict[str, Any]]

    @property
    def namesrv(self) -> str:
        return self.local.namesrv_addr

    def by_mark(self, mark: str) -> dict[str, Any]:
        return next(line for line in self.lines if line["mark"] == mark)


@pytest.fixture(scope="module", name="sent")
def sent_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sent]:
    python = rocketmq_remoting_python()
    root = tmp_path_factory.mktemp("rmq-produce")
    local = start_local_cluster(str(root / "data"), overrides=SMALL_STORE, rocketmq_port=0)
    try:
        with Admin(local.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, QUEUES, QUEUES)
        script = root / "producer.py"
        script.write_text(PRODUCER_SCRIPT)
        done = subprocess.run(
            [str(python), str(script), local.rocketmq_addr, TOPIC],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "HOME": str(root)},  # the client's logs go under ~/logs
        )
        assert done.returncode == 0, f"{done.returncode}\n{done.stdout}\n{done.stderr}"
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        yield Sent(local, lines)
    finally:
        local.stop()


def consumed(namesrv: str, want: int, timeout: float = 30.0) -> dict[str, MessageExt]:
    """Every message of TOPIC, by its `mark` property, once `want` of them are there."""
    got: dict[str, MessageExt] = {}
    with PullConsumer(
        f"CG_CHECK_{time.time_ns()}", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(TOPIC)
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for msg in consumer.poll(timeout=1.0):
                got[msg.properties["mark"]] = msg
    return got


MARKS = ["s0", "s1", "s2", "delayed", "big", "async", "oneway", "o1", "o5", "o2", "b0", "b1", "b2"]


def test_every_send_kind_succeeds_through_the_door(sent: Sent) -> None:
    ops = {line["mark"]: line for line in sent.lines}
    assert set(ops) == {*MARKS[:7], "o1", "o5", "o2", "batch"}
    for line in ops.values():
        if line["op"] != "oneway":
            assert line.get("status") == 0, line  # SEND_OK
        if line["op"] in ("sync", "async", "orderly"):
            assert len(line["msg_id"]) == 32, line  # the client's UNIQ_KEY (its batches: "")


def test_what_the_client_sent_arrives_intact_with_its_msg_id(sent: Sent) -> None:
    got = consumed(sent.namesrv, len(MARKS))
    assert set(got) == set(MARKS)
    for mark, msg in got.items():
        assert msg.topic == TOPIC
        assert msg.keys == [f"key-{mark}"]
        assert msg.properties["color"] == "blue"
        tags = {"b0": "TagB", "b1": "TagB", "b2": "TagB", "delayed": "TagD"}.get(mark, "TagA")
        assert msg.tags == tags
        assert msg.body == (b"z" * 5000 if mark == "big" else f"body-{mark}".encode())
        assert msg.born_host.startswith("127.0.0.1:")
        line = next((x for x in sent.lines if x["mark"] == mark), None)
        if line is not None and line.get("msg_id"):
            assert msg.msg_id == line["msg_id"]  # the id the client returned is the UNIQ_KEY
            if mark != "delayed":  # a delayed send's offset is its place in the schedule queue
                assert msg.queue_offset == line["offset"]
    assert got["big"].sysflag & 0x1  # compressed by the client, stored as sent
    for arg in (1, 5, 2):  # the hash selector: queue = arg % queue count
        assert got[f"o{arg}"].queue.queue_id == arg % QUEUES
    # a delay level: held by the scheduler, then stored in the topic (level 1: 1 s)
    assert got["delayed"].store_timestamp - got["delayed"].born_timestamp >= 900


def test_ferry_admin_finds_a_rocketmq_message_by_id_and_by_key(sent: Sent) -> None:
    line = sent.by_mark("s1")
    by_id = ferry_admin(sent, "queryMsgById", "-i", line["msg_id"])
    assert line["msg_id"] in by_id and "key-s1" in by_id
    by_key = ferry_admin(sent, "queryMsgByKey", "-t", TOPIC, "-k", "key-s1")
    assert line["msg_id"] in by_key


def ferry_admin(sent: Sent, *args: str) -> str:
    def run() -> str | None:
        done = subprocess.run(
            [FERRY, "admin", *args, "-n", sent.namesrv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.stdout if done.returncode == 0 else None

    return wait_for(run, 30, f"ferry admin {' '.join(args)} to find the message (index)")
