"""kill -9 of the proxy under RocketMQ 5's unchanged Python client: the supervisor restarts it on
the same port, a Producer sending in a loop and a PushConsumer carry on by themselves once it
is back, every send the producer saw acknowledged is stored and consumed, and what a
SimpleConsumer received but did not ack comes back after its invisible time."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import Message, Producer, PullConsumer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.supervisor import RestartPolicy, Supervisor
from ferry.runtime.testing.client_programs import RunningClient
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

TOPIC = "ProxyFaults"
HELD_TOPIC = "ProxyFaultsHeld"
HELD_INVISIBLE_S = 12  # longer than the proxy's restart: the messages come back for it

# argv: endpoint, topic, stop file. Sends until the stop file exists, printing one JSON line
# per send: {"body", "id"} when acknowledged, {"body", "error"} when it failed.
PRODUCER = r"""
import json, os, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, stop = sys.argv[1:4]
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=3), (topic,))
producer.startup()
i = 0
while not os.path.exists(stop):
    body = f"m-{i}"
    i += 1
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    try:
        receipt = producer.send(msg)
        print(json.dumps({"body": body, "id": receipt.message_id}), flush=True)
    except Exception as e:
        print(json.dumps({"body": body, "error": type(e).__name__}), flush=True)
        time.sleep(0.2)  # wait-ok: the program's back-off after a failed send
    time.sleep(0.01)  # wait-ok: the producer's pace, not a readiness wait
producer.shutdown()
print("stopped", flush=True)
"""

# argv: endpoint, topic, group; prints each delivery as a JSON line and acks it (SUCCESS),
# until a line comes on stdin
PUSH = r"""
import json, sys, threading
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)
endpoint, topic, group = sys.argv[1:4]
lock = threading.Lock()  # the listener runs on several threads: whole lines

class Listener(MessageListener):
    def consume(self, message):
        line = json.dumps({"body": message.body.decode(), "attempt": message.delivery_attempt})
        with lock:
            print(line, flush=True)
        return ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), group, Listener(),
                        {topic: FilterExpression()})
consumer.startup()
print("started", flush=True)
sys.stdin.readline()
consumer.shutdown()
"""

# argv: endpoint, topic, group, count, invisible seconds. Receives `count` messages and holds
# them (no ack), printing {"held": [ids]}; then receives across whatever happens to the proxy
# (errors printed as {"error"}) until each held one is back, printing {"back": [[id, attempt,
# seconds since held]]}, and acks them.
HOLDER = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, topic, group, count, invisible = sys.argv[1:6]
count, invisible = int(count), int(invisible)
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: FilterExpression()}, await_duration=2)
consumer.startup()
held = []
while len(held) < count:
    held.extend(consumer.receive(count - len(held), invisible))
since = time.monotonic()
print(json.dumps({"held": [m.message_id for m in held]}), flush=True)
wanted, back = {m.message_id for m in held}, []
end = since + 90
while wanted and time.monotonic() < end:
    try:
        got = consumer.receive(16, 30)
    except Exception as e:
        print(json.dumps({"error": type(e).__name__}), flush=True)
        time.sleep(0.2)  # wait-ok: the program's back-off after a failed receive (deadline: end)
        continue
    for m in got:
        if m.message_id in wanted:
            wanted.discard(m.message_id)
            back.append([m.message_id, m.delivery_attempt, time.monotonic() - since])
        consumer.ack(m)
print(json.dumps({"back": back}), flush=True)
consumer.shutdown()
"""


class Supervised:
    """A local cluster with the proxy, every process of it under a Supervisor thread (short
    waits: the test's own policy), and what the supervisor said."""

    def __init__(self, data_dir: str, home: Path) -> None:
        env = {**os.environ, "HOME": str(home)}  # the proxy's client package writes ~/logs
        self.cluster: LocalCluster = start_local_cluster(data_dir, proxy_port=0, env=env)
        self.said: list[str] = []
        policy = RestartPolicy(first_wait=0.05, max_wait=1.0)
        self.supervisor = Supervisor(self.cluster, policy=policy, say=self.said.append)
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self.supervisor.run, args=(self.stopping,), name="supervisor", daemon=True
        )
        self.thread.start()

    def proxy_pid(self) -> int:
        return next(sp.pid for sp in self.cluster.processes if sp.name == "proxy")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        self.cluster.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults-home")


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Iterator[Supervised]:
    running = Supervised(str(tmp_path_factory.mktemp("faults-cluster")), home)
    try:
        with Admin(running.cluster.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, 4, 4)
            admin.create_topic(HELD_TOPIC, 4, 4)
        yield running
    finally:
        running.stop()


def stored_bodies(namesrv: str, topic: str) -> list[str]:
    """Every message of every queue of `topic`, read from offset 0 with Ferry's PullConsumer."""
    with Admin(namesrv) as admin:
        queues = admin.queues(topic)
        ends = {q: admin.max_offset(q) for q in queues}
    got: dict[Any, list[str]] = {q: [] for q in queues}
    consumer = PullConsumer("cg-faults-audit", namesrv, auto_commit=False)
    consumer.start()
    try:
        consumer.assign(queues)
        for q in queues:
            consumer.seek(q, 0)

        def read_all() -> bool:
            for msg in consumer.poll(timeout=1.0):
                queue = next(q for q in queues if q.queue_id == msg.queue_id)
                got[queue].append(msg.body.decode())
            return all(len(got[q]) >= ends[q] for q in queues)

        wait_for(read_all, 60, "every queue read to its end")
    finally:
        consumer.shutdown()
    return [body for bodies in got.values() for body in bodies]


def acked(producer: RunningClient) -> list[str]:
    return [r["body"] for r in producer.json_lines() if "id" in r]


@pytest.mark.timeout(420)
def test_kill_9_of_the_proxy_under_a_producer_and_a_push_consumer(
    supervised: Supervised, home: Path
) -> None:
    endpoint = supervised.cluster.proxy_addr
    namesrv = supervised.cluster.namesrv_addr
    with Producer("pg-faults-held", namesrv) as sdk:
        for i in range(3):
            sdk.send(Message(HELD_TOPIC, f"held-{i}".encode()))
    stop_file = home / "stop-producer"
    producer = RunningClient(home, PRODUCER, endpoint, TOPIC, str(stop_file), name="producer")
    push = RunningClient(home, PUSH, endpoint, TOPIC, "cg-faults-push", name="push")
    holder = RunningClient(
        home,
        HOLDER,
        endpoint,
        HELD_TOPIC,
        "cg-faults-held",
        "3",
        str(HELD_INVISIBLE_S),
        name="holder",
    )
    try:
        wait_for(lambda: len(acked(producer)) >= 50, 90, "50 sends acknowledged")
        wait_for(lambda: len(push.json_lines()) >= 20, 90, "20 deliveries at the push consumer")
        wait_for(lambda: any("held" in r for r in holder.json_lines()), 60, "3 messages held")
        before = len(acked(producer))
        delivered_before = len(push.json_lines())

        pid = supervised.proxy_pid()
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: any(ln.startswith("proxy is back") for ln in supervised.said),
            60,
            "the supervisor's `proxy is back`",
        )
        back_s = time.monotonic() - killed
        assert supervised.proxy_pid() != pid
        assert any(f"proxy (pid {pid}) exited with SIGKILL" in ln for ln in supervised.said)

        # the clients go on by themselves: more sends acknowledged, more deliveries
        wait_for(lambda: len(acked(producer)) >= before + 50, 120, "sends after the restart")
        wait_for(
            lambda: len(push.json_lines()) >= delivered_before + 20, 120, "deliveries after it"
        )
        reconnect_s = time.monotonic() - killed

        stop_file.touch()
        wait_for(lambda: "stopped" in producer.lines, 60, "the producer to stop")
        sent = acked(producer)
        # sends while the proxy is down fail at the client: 5.1.2's Producer makes its 3
        # attempts back to back (it applies no backoff between send attempts), all in the gap
        failed = [r for r in producer.json_lines() if "error" in r]
        stored = stored_bodies(namesrv, TOPIC)
        lost = set(sent) - set(stored)
        assert not lost, f"{len(lost)} acknowledged sends not stored, e.g. {sorted(lost)[:5]}"

        def all_consumed() -> set[str]:
            return set(sent) - {r["body"] for r in push.json_lines()}

        wait_for(lambda: not all_consumed(), 120, "every acknowledged send consumed")

        outcome = wait_for(
            lambda: next((r for r in holder.json_lines() if "back" in r), None),
            120,
            "the held messages back",
        )
        held = next(r["held"] for r in holder.json_lines() if "held" in r)
        assert sorted(m[0] for m in outcome["back"]) == sorted(held)
        assert {m[1] for m in outcome["back"]} == {2}  # their second delivery
        # back for their invisible time, not sooner (the restart did not release them)
        assert min(m[2] for m in outcome["back"]) >= HELD_INVISIBLE_S - 1
        print(
            f"proxy back {back_s:.2f} s after kill -9; clients sending and consuming again "
            f"within {reconnect_s:.2f} s; {len(sent)} acknowledged, {len(failed)} failed "
            f"({sorted({r['error'] for r in failed})}), {len(stored)} stored, "
            f"{len(push.json_lines())} deliveries"
        )
    except BaseException:
        for name, program in (("producer", producer), ("push", push), ("holder", holder)):
            print(f"--- {name} stderr\n{program.stderr_tail()}")
        print("--- supervisor\n" + "\n".join(supervised.said))
        raise
    finally:
        stop_file.touch()
        for program in (producer, push, holder):
            program.stop()
