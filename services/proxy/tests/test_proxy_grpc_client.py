"""The proxy process against RocketMQ 5's unchanged Python client (rocketmq-python-client 5.1.2,
run from a venv of its own): normal sends through the proxy arrive in Ferry with body, tag,
keys, properties and the client's message id; the calls the client does not make here are
checked with the generated stub: Settings answered, a Status for what is not served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, MessageExt, PullConsumer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

TOPIC = "ProxySend"
COUNT = 5

# argv: endpoint, topic, count; prints one JSON line per sent message
SEND = r"""
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
try:
    for i in range(count):
        msg = Message()
        msg.topic = topic
        msg.body = f"body {i}".encode()
        msg.tag = f"Tag{i % 2}"
        msg.keys = f"key-{i}"
        msg.add_property("order", str(i))
        msg.add_property("color", "blue")
        receipt = producer.send(msg)
        print(json.dumps({"i": i, "id": receipt.message_id, "offset": receipt.offset}), flush=True)
finally:
    producer.shutdown()
"""

# argv: endpoint, topic; the generated stub's view of calls the producer above does not make
CALLS = r"""
import json, sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic = sys.argv[1], sys.argv[2]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
meta = [("x-mq-client-id", "probe@1")]
out = {}
settings = d.Settings(client_type=d.PRODUCER)
settings.publishing.topics.add(name=topic)
settings.publishing.max_body_size = 128 << 20
replies = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=meta, timeout=5)
first = next(replies)
out["settings"] = [first.status.code, first.settings.publishing.max_body_size]
missing = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="NoSuchTopic")), timeout=5)
out["missing_topic"] = missing.status.code
beat = stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), timeout=5)
out["no_client_id"] = beat.status.code
receive = list(stub.ReceiveMessage(s.ReceiveMessageRequest(), metadata=meta, timeout=5))
out["receive"] = [(r.status.code, r.status.message) for r in receive]
ack = stub.AckMessage(s.AckMessageRequest(), metadata=meta, timeout=5)
out["ack"] = ack.status.code
print(json.dumps(out))
"""


class ProxyProcess:
    """`python -m ferry.proxy` on a free port; its lines kept, its address from READY."""

    def __init__(self, namesrv: str, home: Path) -> None:
        self.lines: list[str] = []
        args = ["--set", f"namesrvAddr={namesrv}", "--set", "proxyListenPort=0"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ferry.proxy", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            # the generated modules' package writes its log under ~/logs when imported
            env={**os.environ, "HOME": str(home), "FERRY_PARENT_PID": str(os.getpid())},
        )
        self._reader = threading.Thread(target=self._read, name="proxy-output", daemon=True)
        self._reader.start()
        ready = wait_for(self._ready_line, 60, "the proxy's READY line")
        self.addr = ready.split("grpc=", 1)[1].strip()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _ready_line(self) -> str | None:
        found = next((ln for ln in self.lines if ln.startswith("READY proxy ")), None)
        if found is None and self.proc.poll() is not None:
            pytest.fail("the proxy exited before READY:\n" + "\n".join(self.lines[-20:]))
        return found

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)  # it ends at the output's end
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(str(tmp_path_factory.mktemp("proxy-cluster")))
    try:
        with Admin(local.namesrv_addr) as admin:  # READY comes before the registration
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, 4, 4)
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-home")


@pytest.fixture(scope="module")
def proxy(cluster: LocalCluster, home: Path) -> Iterator[ProxyProcess]:
    process = ProxyProcess(cluster.namesrv_addr, home)
    try:
        yield process
    finally:
        process.stop()


def run_client(home: Path, program: str, *args: str) -> str:
    script = home / "program.py"
    script.write_text(program)
    done = subprocess.run(
        [str(rocketmq_grpc_python()), str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(300)
def test_normal_sends_through_the_proxy_reach_ferry_intact(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    out = run_client(home, SEND, proxy.addr, TOPIC, str(COUNT))
    sent = [json.loads(line) for line in out.splitlines()]
    assert [s["i"] for s in sent] == list(range(COUNT))
    ids = [s["id"] for s in sent]
    assert len(set(ids)) == COUNT and all(len(i) == 34 for i in ids)  # the client's own ids

    got: dict[str, MessageExt] = {}
    with PullConsumer(
        "cg-proxy-send", cluster.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(TOPIC)

        def all_arrived() -> bool:
            for msg in consumer.poll(timeout=1.0):
                got[msg.msg_id] = msg
            return len(got) >= COUNT

        wait_for(all_arrived, 30, "the 5 messages sent through the proxy")
    assert sorted(got) == sorted(ids)
    for s in sent:
        msg, i = got[s["id"]], s["i"]
        assert msg.body == f"body {i}".encode()
        assert msg.tags == f"Tag{i % 2}"
        assert msg.keys == [f"key-{i}"]
        assert msg.properties["order"] == str(i)
        assert msg.properties["color"] == "blue"
        assert msg.properties["UNIQ_KEY"] == s["id"]
        assert msg.queue_offset == s["offset"]


def test_settings_are_answered_and_calls_not_served_get_a_status(
    proxy: ProxyProcess, home: Path
) -> None:
    seen: dict[str, Any] = json.loads(run_client(home, CALLS, proxy.addr, TOPIC))
    assert seen["settings"] == [20000, 4 * 1024 * 1024]  # OK, the proxy's limit, never 0
    assert seen["missing_topic"] == 40402  # TOPIC_NOT_FOUND
    assert seen["no_client_id"] == 40017  # CLIENT_ID_REQUIRED
    assert seen["receive"] == [[50100, "ReceiveMessage is not served by this proxy yet"]]
    assert seen["ack"] == 50100  # NOT_IMPLEMENTED
    assert proxy.proc.poll() is None  # none of it stopped the proxy
