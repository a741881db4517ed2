"""The unchanged `rocketmq` 0.4.4 client (rocketmq-client-cpp inside) as child processes run
with its own venv's python, for the tests of the RocketMQ doors: a push consumer program that
prints one JSON line per message, a producer program that sends what a JSON spec lists, and
the waits these tests share (a new group starts at the end of each queue, so tests probe
until each consumer got one message)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocketmq_client_programs import CONSUMER, PRODUCER, PULLER

from ferry.admin import Admin
from ferry.client import Message, MessageQueue, Producer
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.pytest_support import wait_for
from ferry.runtime.testing.remoting_client import RemotingClient

__all__ = ["CONSUMER", "PRODUCER", "PULLER", "wait_for"]  # the programs, for the test modules too

QUEUES = 4


class RocketMQPuller:
    """The pull program as a child process: round() runs one round and returns its line."""

    def __init__(self, python: Path, home: Path, addr: str, group: str, topic: str) -> None:
        script = home / "puller.py"
        script.write_text(PULLER)
        self.proc = subprocess.Popen(
            [str(python), str(script), addr, group, topic],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOME": str(home)},
        )

    def round(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the pull program ended"
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def run_producer(python: Path, home: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs the producer program to its end; its lines, by message."""
    home.mkdir(parents=True, exist_ok=True)
    script = home / "producer.py"
    script.write_text(PRODUCER)
    done = subprocess.run(
        [str(python), str(script), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "HOME": str(home)},  # the client's logs go under ~/logs
    )
    assert done.returncode == 0, f"{done.returncode}\n{done.stdout}\n{done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


class RocketMQConsumer:
    """The consumer program as a child process; its lines are gathered by a thread."""

    def __init__(
        self,
        python: Path,
        script: Path,
        addr: str,
        group: str,
        topic: str,
        expression: str = "*",
        options: dict[str, Any] | None = None,
        home: Path | None = None,
    ) -> None:
        """home: the client's HOME (its logs, and a broadcasting member's offsets file)."""
        self._env = {**os.environ, "HOME": str(home)} if home is not None else None
        self.fail_keys: list[str] = []
        self._args = [str(python), str(script), addr, group, topic, expression]
        self._options = json.dumps(options or {})
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.messages: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> RocketMQConsumer:
        self.proc = subprocess.Popen(
            [*self._args, ",".join(self.fail_keys), self._options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self._env,
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


def on_queue(queues: list[MessageQueue], _msg: Message, queue_id: int) -> MessageQueue:
    return next(q for q in queues if q.queue_id == queue_id)


def probe_until_consumed(
    producer: Producer,
    topic: str,
    members: list[RocketMQConsumer],
    timeout_s: float = 30,
    queues: int = QUEUES,
) -> None:
    """A new group starts at the end of each queue (QUERY_CONSUMER_OFFSET answered 22): probes
    go to every queue until each member has consumed one sent after it started pulling."""
    deadline = time.monotonic() + timeout_s
    n = 0
    while True:
        for queue_id in range(queues):
            producer.send(Message(topic, f"probe-{n}", tags="probe"), on_queue, queue_id)
            n += 1
        stop = time.monotonic() + 1.0
        while time.monotonic() < stop:
            if all(any(b.startswith("probe-") for b in c.bodies()) for c in members):
                return
            time.sleep(0.05)  # wait-ok: polling interval of a deadline-bounded wait
        assert time.monotonic() < deadline, "the consumers consumed no probe"


def committed_to_the_end(
    door: RemotingClient, group: str, topic: str, queues: int = QUEUES
) -> bool:
    """Whether the group's committed offset of every queue is the queue's max offset (asked
    through the broker's door)."""
    for q in range(queues):
        fields = {"consumerGroup": group, "topic": topic, "queueId": str(q)}
        got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
        top = door.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
        if got.code != ResponseCode.SUCCESS or got.ext_fields["offset"] != top.ext_fields["offset"]:
            return False
    return True


def consumer_ids(door: RemotingClient, group: str) -> list[str]:
    """The group's members as the broker's door lists them (GET_CONSUMER_LIST_BY_GROUP)."""
    got = door.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    return list(json.loads(got.body)["consumerIdList"]) if got.code == 0 else []


# ---- what the real-client test modules share: their cluster, topics and consumers ----------


@contextmanager
def rocketmq_cluster(root: Path) -> Iterator[LocalCluster]:
    """A cluster with its RocketMQ doors; short delay levels, so that a retry (level 3 +
    reconsume times) comes back within a second."""
    local = start_local_cluster(
        str(root), rocketmq_port=0, overrides={"messageDelayLevel": "1s 1s 1s 1s 1s"}
    )
    try:
        yield local
    finally:
        local.stop()


def new_topic(cluster: LocalCluster, name: str, queues: int = QUEUES) -> str:
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(name, queues, queues)
    return name


@contextmanager
def consumer_factory(
    python: Path, cluster: LocalCluster, tmp_path: Path
) -> Iterator[Callable[..., RocketMQConsumer]]:
    """make(group, topic, expression="*", **options): consumer programs (not started yet),
    each with a HOME of its own; every one is stopped when the block ends."""
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    made: list[RocketMQConsumer] = []

    def make(group: str, topic: str, expression: str = "*", **options: Any) -> RocketMQConsumer:
        home = tmp_path / f"home-{len(made)}"
        home.mkdir()
        c = RocketMQConsumer(
            python, script, cluster.rocketmq_addr, group, topic, expression, options, home
        )
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()
