"""The proxy with authenticationEnabled, authorizationEnabled and tlsEnable, against a local
cluster with the same keys (CURVE inside, X.509 TLS on the gRPC port) and RocketMQ 5's
unchanged Python client with tls_enable=True, trusting the test's CA through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.

A user's signed calls work; a wrong secret gets UNAUTHORIZED, a missing permission FORBIDDEN,
and neither stores nor acks anything; bad authorization metadata of every kind gets a Status
on every kind of call (unary, server stream, Telemetry, calls not served yet); a plain-text
client fails cleanly; the proxy keeps serving through all of it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ferry.admin import Admin
from ferry.protocol.auth import Credentials
from ferry.proxy.protocol import SERVICE, definition, methods
from ferry.proxy.users import PULL_S, PULL_TIMEOUT_S
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

ProxyProcess = Any  # conftest's (the proxy_process fixture)
METHODS = methods()

INNER = Credentials("ferry-inner", "inner-secret-0123")
ROOT = Credentials("root", "root-secret-0123")
ALICE = Credentials("alice", "alice-secret-0123")  # Pub and Sub on Sec*, Sub on cg-sec
READER = Credentials("reader", "reader-secret-0123")  # Sub on the topics only, no group
TOPIC = "SecTopic"
ACK_TOPIC = "SecAck"
SIMPLE_TOPIC = "SecSimple"
GROUP = "cg-sec"
SECURITY = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "innerClientAuthenticationCredentials": json.dumps(
        {"accessKey": INNER.access_key, "secretKey": INNER.secret_key}
    ),
}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_tls_files(directory: Path) -> dict[str, str]:
    """A test CA, and a server certificate for 127.0.0.1 it signed (openssl)."""
    ca_key, ca, key, csr, cert = (
        directory / n for n in ("ca.key", "ca.pem", "server.pem.key", "server.csr", "server.pem")
    )
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", str(ca_key), "-out", str(ca), "-subj", "/CN=ferry-test-ca",
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(ext),
    )  # fmt: skip
    return {"ca": str(ca), "cert": str(cert), "key": str(key)}


class Secure:
    """The cluster, the proxy, and how the test reaches both."""

    def __init__(
        self, cluster: LocalCluster, proxy: ProxyProcess, server_key: str, ca: str, home: Path
    ) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.server_key = server_key
        self.ca = ca
        self.home = home

    def stored(self, topic: str) -> int:
        """How many messages the topic's queues hold (max offsets), read as root."""
        with root_admin(self.cluster, self.server_key) as admin:
            stats = admin.topic_stats(topic)
        return sum(q.max_offset for queues in stats.values() for q in queues)


def root_admin(cluster: LocalCluster, server_key: str) -> Admin:
    return Admin(cluster.namesrv_addr, credentials=ROOT, tls_server_key=server_key)


@pytest.fixture(scope="module")
def secure(
    tmp_path_factory: pytest.TempPathFactory, proxy_process: type[ProxyProcess]
) -> Iterator[Secure]:
    base = tmp_path_factory.mktemp("proxy-secure")
    keys = base / "keys"
    subprocess.run(
        [sys.executable, "-m", "ferry.cli", "keys", "generate", str(keys)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    curve = {
        "tlsEnable": "true",
        "tlsServerKeyFile": str(keys / "server.key_secret"),
        "tlsInternalKeyFile": str(keys / "internal.key_secret"),
    }
    server_key = str(keys / "server.key")
    tls = make_tls_files(base)
    init_user = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    cluster = start_local_cluster(
        str(base / "cluster"),
        overrides={**SECURITY, **curve, "initAuthenticationUser": init_user},
    )
    proxy = None
    try:
        with root_admin(cluster, server_key) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, 1, 1)
            admin.create_topic(ACK_TOPIC, 1, 1)
            admin.create_topic(SIMPLE_TOPIC, 1, 1)
            admin.create_user(ALICE.access_key, ALICE.secret_key)
            admin.create_acl(f"User:{ALICE.access_key}", ["Topic:Sec*"], ["Pub", "Sub"], "Allow")
            admin.create_acl(f"User:{ALICE.access_key}", [f"Group:{GROUP}"], ["Sub"], "Allow")
            admin.create_user(READER.access_key, READER.secret_key)
            admin.create_acl(f"User:{READER.access_key}", ["Topic:Sec*"], ["Sub"], "Allow")
        settings = [f"{k}={v}" for k, v in {**SECURITY, **curve}.items()]
        settings += [f"tlsServerCertPath={tls['cert']}", f"tlsServerKeyPath={tls['key']}"]
        home = base / "home"
        home.mkdir()
        # READY comes after the proxy's first pull of the users created above
        proxy = proxy_process(cluster.namesrv_addr, home, settings)
        yield Secure(cluster, proxy, server_key, tls["ca"], home)
    finally:
        if proxy is not None:
            proxy.stop()
        cluster.stop()


def run(secure: Secure, program: str, *args: str, timeout: float = 120) -> Any:
    """Runs `program` with the client's python, trusting the test CA; its JSON stdout."""
    script = secure.home / "program.py"
    script.write_text(program)
    env = {**os.environ, "HOME": str(secure.home), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": secure.ca}
    done = subprocess.run(
        [str(rocketmq_grpc_python()), str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def creds(c: Credentials) -> tuple[str, str]:
    return c.access_key, c.secret_key


# argv: endpoint, topic, access key, secret key, count. The official client over TLS; prints
# the sent ids, or where it failed and how.
SEND = r"""
import json, sys
import logging
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.v5.log import logger
endpoint, topic, ak, sk, count = sys.argv[1:6]
count = int(count)
out = {"sent": [], "error": None, "logged": []}

class Errors(logging.Handler):  # what the client logs of the Status it was refused with
    def emit(self, record):
        out["logged"].append(record.getMessage())

logger.addHandler(Errors(logging.ERROR))
producer = Producer(ClientConfiguration(endpoint, Credentials(ak, sk)), (topic,), tls_enable=True)
try:
    producer.startup()
    for i in range(count):
        msg = Message()
        msg.topic = topic
        msg.body = f"secure {i}".encode()
        msg.tag = "T"
        out["sent"].append(producer.send(msg).message_id)
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
finally:
    try:
        producer.shutdown()
    except Exception:
        pass
print(json.dumps(out))
"""

# argv: endpoint, topic, group, access key, secret key. The official SimpleConsumer over TLS:
# receives until a message comes (30 s at most), acks it, receives again; or how it failed.
SIMPLE = r"""
import json, logging, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.v5.log import logger
endpoint, topic, group, ak, sk = sys.argv[1:6]
out = {"got": [], "after_ack": None, "error": None, "logged": []}

class Errors(logging.Handler):
    def emit(self, record):
        out["logged"].append(record.getMessage())

logger.addHandler(Errors(logging.ERROR))
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials(ak, sk)), group,
                          {topic: FilterExpression()}, await_duration=2, tls_enable=True)
try:
    consumer.startup()
    end = time.monotonic() + 30
    while not out["got"] and time.monotonic() < end:
        for m in consumer.receive(16, 20):
            out["got"].append([m.message_id, m.body.decode(), m.delivery_attempt])
            consumer.ack(m)
    out["after_ack"] = len(consumer.receive(16, 20))
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
finally:
    try:
        consumer.shutdown()
    except Exception:
        pass
print(json.dumps(out))
"""

# The generated stub over TLS with hand-made signatures (as the client makes them).
STUB = r"""
import hmac, hashlib, json, sys, time
from datetime import datetime, timedelta
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc

def stub_of(endpoint, tls=True):
    channel = (grpc.secure_channel(endpoint, grpc.ssl_channel_credentials()) if tls
               else grpc.insecure_channel(endpoint))
    return service_pb2_grpc.MessagingServiceStub(channel)

def signed(ak, sk, shift_s=0, signature=None):
    stamp = (datetime.now() + timedelta(seconds=shift_s)).strftime("%Y%m%dT%H%M%SZ")
    sig = signature or hmac.new(sk.encode(), stamp.encode(), hashlib.sha1).hexdigest()
    header = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"
    return [("x-mq-client-id", "probe@sec"), ("x-mq-date-time", stamp), ("authorization", header)]

def route(stub, meta, topic):
    return stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=meta,
                           timeout=5)
"""

# argv: endpoint, topic, group, alice ak, sk, reader ak, sk
ACK = (
    STUB
    + r"""
endpoint, topic, group, ak, sk, rak, rsk = sys.argv[1:8]
stub = stub_of(endpoint)
queue = route(stub, signed(ak, sk), topic).message_queues[0]

def receive(meta, invisible_s, poll_s):
    req = s.ReceiveMessageRequest(group=d.Resource(name=group), message_queue=queue, batch_size=1)
    req.filter_expression.type = d.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.seconds = invisible_s
    req.long_polling_timeout.seconds = poll_s
    return list(stub.ReceiveMessage(req, metadata=meta, timeout=poll_s + 10))

def messages(replies):
    return [(r.message.system_properties.message_id, r.message.system_properties.delivery_attempt,
             r.message.system_properties.receipt_handle)
            for r in replies if r.WhichOneof("content") == "message"]

def ack(meta, handle, message_id):
    req = s.AckMessageRequest(group=d.Resource(name=group), topic=d.Resource(name=topic))
    req.entries.add(message_id=message_id, receipt_handle=handle)
    return stub.AckMessage(req, metadata=meta, timeout=5).status.code

out = {}
out["reader_receive"] = [r.status.code for r in receive(signed(rak, rsk), 3, 1)]
first = []
end = time.monotonic() + 30
while not first and time.monotonic() < end:
    first = messages(receive(signed(ak, sk), 3, 5))
mid, attempt, handle = first[0]
out["first"] = [mid, attempt]
out["reader_ack"] = ack(signed(rak, rsk), handle, mid)
out["wrong_secret_ack"] = ack(signed(ak, "not-the-secret"), handle, mid)
again = []
end = time.monotonic() + 40
while not again and time.monotonic() < end:
    again = messages(receive(signed(ak, sk), 30, 5))
out["again"] = [[m, a] for m, a, _ in again]
out["alice_ack"] = ack(signed(ak, sk), again[0][2], again[0][0]) if again else None
print(json.dumps(out))
"""
)

# argv: endpoint, topic, alice ak, sk, reader ak, sk. Every kind of bad signature on every
# kind of call; each answer's Status code (or the gRPC error, which must not happen).
BAD = (
    STUB
    + r"""
endpoint, topic, ak, sk, rak, rsk = sys.argv[1:7]
stub = stub_of(endpoint)
good = signed(ak, sk)
client_id = [("x-mq-client-id", "probe@sec")]

def stamp_only(ak):
    meta = signed(ak, sk)
    return [m for m in meta if m[0] != "authorization"]

def header(value):
    return client_id + [("x-mq-date-time", signed(ak, sk)[1][1]), ("authorization", value)]

variants = {
    "none": client_id,
    "no_date": [m for m in good if m[0] != "x-mq-date-time"],
    "no_header": stamp_only(ak),
    "garbage_header": header("garbage"),
    "other_scheme": header("Bearer abc"),
    "no_signature": header("MQv2-HMAC-SHA1 Credential=" + ak),
    "empty_credential": header("MQv2-HMAC-SHA1 Credential=, Signature=00"),
    "garbage_signature": signed(ak, sk, signature="zz-not-hex"),
    "wrong_secret": signed(ak, "not-the-secret"),
    "unknown_key": signed("nobody-here", "whatever"),
    "two_days_old": signed(ak, sk, shift_s=-2 * 86400),
    "a_year_ahead": signed(ak, sk, shift_s=365 * 86400),
    "bad_stamp": client_id + [("x-mq-date-time", "yesterday")] + [signed(ak, sk)[2]],
    "huge_header": header("MQv2-HMAC-SHA1 Credential=" + "a" * 6000),
}

def query_route(meta):
    return route(stub, meta, topic).status.code

def heartbeat(meta):
    req = s.HeartbeatRequest(client_type=d.SIMPLE_CONSUMER, group=d.Resource(name="cg-sec"))
    return stub.Heartbeat(req, metadata=meta, timeout=5).status.code

def send(meta):
    req = s.SendMessageRequest()
    m = req.messages.add()
    m.topic.name = topic
    m.body = b"must not be stored"
    m.system_properties.message_id = "01" + "0" * 32
    m.system_properties.body_digest.type = d.MD5
    m.system_properties.message_type = d.NORMAL
    return stub.SendMessage(req, metadata=meta, timeout=5).status.code

def receive(meta):
    req = s.ReceiveMessageRequest(group=d.Resource(name="cg-sec"),
                                  message_queue=d.MessageQueue(topic=d.Resource(name=topic)))
    req.long_polling_timeout.seconds = 1
    return [r.status.code for r in stub.ReceiveMessage(req, metadata=meta, timeout=10)]

def telemetry(meta, publish=topic):
    settings = d.Settings(client_type=d.PRODUCER)
    settings.publishing.topics.add(name=publish)
    replies = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=meta,
                             timeout=5)
    return [r.status.code for r in replies]

def pull(meta):  # not served by the proxy: still checked first
    req = s.PullMessageRequest(group=d.Resource(name="cg-sec"),
                               message_queue=d.MessageQueue(topic=d.Resource(name=topic)))
    return [r.status.code for r in stub.PullMessage(req, metadata=meta, timeout=5)]

def recall(meta):  # not served either
    req = s.RecallMessageRequest(topic=d.Resource(name=topic), recall_handle="x")
    return stub.RecallMessage(req, metadata=meta, timeout=5).status.code

calls = {"QueryRoute": query_route, "Heartbeat": heartbeat, "SendMessage": send,
         "ReceiveMessage": receive, "Telemetry": telemetry, "PullMessage": pull,
         "RecallMessage": recall}

def attempt(fn, meta):
    try:
        return fn(meta)
    except grpc.RpcError as e:
        return "rpc-error " + e.code().name

out = {"bad": {v: {c: attempt(fn, meta) for c, fn in calls.items()}
               for v, meta in variants.items()}}
reader = signed(rak, rsk)
out["reader"] = {c: attempt(fn, reader) for c, fn in calls.items()}
out["alice"] = {c: attempt(fn, good) for c, fn in calls.items()
                if c not in ("SendMessage", "ReceiveMessage")}
# the Python client's local time labelled Z: a client nine hours east of UTC is accepted
out["tokyo_clock"] = query_route(signed(ak, sk, shift_s=9 * 3600))
out["new_york_clock"] = query_route(signed(ak, sk, shift_s=-5 * 3600))
print(json.dumps(out))
"""
)

PLAIN = (
    STUB
    + r"""
endpoint, topic, ak, sk = sys.argv[1:5]
out = {}
try:
    route(stub_of(endpoint, tls=False), signed(ak, sk), topic)
    out["plain"] = "answered"
except grpc.RpcError as e:
    out["plain"] = e.code().name
out["tls"] = route(stub_of(endpoint), signed(ak, sk), topic).status.code
print(json.dumps(out))
"""
)


@pytest.mark.timeout(300)
def test_a_users_signed_sends_over_tls_are_stored(secure: Secure) -> None:
    before = secure.stored(TOPIC)
    out = run(secure, SEND, secure.proxy.addr, TOPIC, *creds(ALICE), "3")
    assert out["error"] is None, out
    assert len(set(out["sent"])) == 3
    wait_for(lambda: secure.stored(TOPIC) == before + 3, 15, "the three sends to be stored")


@pytest.mark.timeout(300)
def test_a_wrong_secret_is_unauthorized_and_stores_nothing(secure: Secure) -> None:
    before = secure.stored(TOPIC)
    wrong = Credentials(ALICE.access_key, "not-the-secret")
    out = run(secure, SEND, secure.proxy.addr, TOPIC, *creds(wrong), "1")
    assert out["sent"] == []
    # the client turns the refused QueryRoute of its startup into a plain Exception, and logs
    # the UnauthorizedException (code 40100) it was answered with
    assert out["error"] == ["Exception", f"failed to fetch topic:{TOPIC} route."], out
    refusals = [line for line in out["logged"] if "does not match access key 'alice'" in line]
    assert refusals and all("40100" in line for line in refusals), out["logged"]
    assert secure.stored(TOPIC) == before
    assert secure.proxy.proc.poll() is None


@pytest.mark.timeout(300)
def test_a_missing_permission_is_forbidden_and_stores_nothing(secure: Secure) -> None:
    before = secure.stored(TOPIC)
    out = run(secure, SEND, secure.proxy.addr, TOPIC, *creds(READER), "1")
    assert out["sent"] == []
    assert out["error"][0] == "ForbiddenException", out
    assert "Pub" in out["error"][1] and TOPIC in out["error"][1]
    assert secure.stored(TOPIC) == before


@pytest.mark.timeout(300)
def test_a_users_simple_consumer_receives_and_acks_over_tls(secure: Secure) -> None:
    sent = run(secure, SEND, secure.proxy.addr, SIMPLE_TOPIC, *creds(ALICE), "1")
    assert sent["error"] is None, sent
    # the reader may Sub the topic but not the group: refused, and the message stays
    refused = run(secure, SIMPLE, secure.proxy.addr, SIMPLE_TOPIC, GROUP, *creds(READER))
    assert refused["got"] == [], refused
    assert refused["error"] is not None and refused["error"][0] == "ForbiddenException", refused
    assert f"may not Sub on Group:{GROUP}" in refused["error"][1], refused
    out = run(secure, SIMPLE, secure.proxy.addr, SIMPLE_TOPIC, GROUP, *creds(ALICE))
    assert out["error"] is None, out
    assert out["got"] == [[sent["sent"][0], "secure 0", 1]]
    assert out["after_ack"] == 0  # acked: it does not come back


@pytest.mark.timeout(300)
def test_a_refused_ack_leaves_the_message_to_come_back(secure: Secure) -> None:
    sent = run(secure, SEND, secure.proxy.addr, ACK_TOPIC, *creds(ALICE), "1")
    assert sent["error"] is None, sent
    out = run(secure, ACK, secure.proxy.addr, ACK_TOPIC, GROUP, *creds(ALICE), *creds(READER))
    assert out["reader_receive"] == [40300]  # no Sub on the group
    assert out["first"] == [sent["sent"][0], 1]
    assert out["reader_ack"] == 40300
    assert out["wrong_secret_ack"] == 40100
    # neither ack took: the message is delivered again once its 3 s are up
    assert out["again"] == [[sent["sent"][0], 2]]
    assert out["alice_ack"] == 20000


@pytest.mark.timeout(300)
def test_bad_authorization_gets_a_typed_status_on_every_kind_of_call(secure: Secure) -> None:
    before = secure.stored(TOPIC)
    out = run(secure, BAD, secure.proxy.addr, TOPIC, *creds(ALICE), *creds(READER))
    for variant, calls in out["bad"].items():
        for call, code in calls.items():
            streaming = call in ("ReceiveMessage", "Telemetry", "PullMessage")
            want = [40100] if streaming else 40100
            assert code == want, (variant, call, code)
    assert out["reader"] == {
        "QueryRoute": 20000,  # Pub or Sub on the topic
        "Heartbeat": 40300,  # a consumer's needs Sub on its group
        "SendMessage": 40300,
        "ReceiveMessage": [40300],
        "Telemetry": [40300],  # publishing needs Pub
        "PullMessage": [40300],
        "RecallMessage": 40300,
    }
    alice = out["alice"]
    assert alice["QueryRoute"] == alice["Heartbeat"] == 20000
    assert alice["Telemetry"][0] == 20000  # Settings answered
    assert alice["PullMessage"] == [50100] and alice["RecallMessage"] == 50100  # then NOT_IMPL
    assert out["tokyo_clock"] == out["new_york_clock"] == 20000
    assert secure.stored(TOPIC) == before
    assert secure.proxy.proc.poll() is None


@pytest.mark.timeout(300)
def test_a_plain_text_client_fails_cleanly_and_tls_keeps_serving(secure: Secure) -> None:
    out = run(secure, PLAIN, secure.proxy.addr, TOPIC, *creds(ALICE))
    assert out["plain"] == "UNAVAILABLE"
    assert out["tls"] == 20000
    assert secure.proxy.proc.poll() is None


def _route_code(secure: Secure, who: Credentials) -> int:
    """QueryRoute signed by `who`, from this process over TLS: its Status code."""
    metadata = [("x-mq-client-id", "probe@staleness"), *sign(who)]
    credentials = grpc.ssl_channel_credentials(Path(secure.ca).read_bytes())
    with grpc.secure_channel(secure.proxy.addr, credentials) as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/QueryRoute",
            request_serializer=METHODS["QueryRoute"].request.SerializeToString,
            response_deserializer=METHODS["QueryRoute"].response.FromString,
        )
        request = METHODS["QueryRoute"].request(topic=definition.Resource(name=TOPIC))
        return int(call(request, metadata=metadata, timeout=5).status.code)


def sign(who: Credentials) -> list[tuple[str, str]]:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    mac = hmac.new(who.secret_key.encode(), stamp.encode(), hashlib.sha1).hexdigest()
    header = f"MQv2-HMAC-SHA1 Credential={who.access_key}, SignedHeaders=x-mq-date-time, "
    return [("x-mq-date-time", stamp), ("authorization", header + f"Signature={mac}")]


@pytest.mark.timeout(120)
def test_users_changed_on_the_masters_reach_the_proxy_within_its_pull_period(
    secure: Secure,
) -> None:
    late = Credentials("late", "late-secret-0123")
    assert _route_code(secure, late) == 40100  # not a user yet
    with root_admin(secure.cluster, secure.server_key) as admin:
        admin.create_user(late.access_key, late.secret_key)
        admin.create_acl(f"User:{late.access_key}", [f"Topic:{TOPIC}"], ["Sub"], "Allow")
        began = time.monotonic()
        # PULL_S (2 s) plus a request's timeout is the bound; the deadline leaves room
        wait_for(lambda: _route_code(secure, late) == 20000, 10, "the new user at the proxy")
        took_new = time.monotonic() - began
        admin.delete_acl(f"User:{late.access_key}", [f"Topic:{TOPIC}"])
        began = time.monotonic()
        wait_for(lambda: _route_code(secure, late) == 40300, 10, "the revoked ACL at the proxy")
        took_revoked = time.monotonic() - began
        admin.delete_user(late.access_key)
        wait_for(lambda: _route_code(secure, late) == 40100, 10, "the deleted user at the proxy")
    assert took_new < PULL_S + PULL_TIMEOUT_S + 1 and took_revoked < PULL_S + PULL_TIMEOUT_S + 1
    assert secure.proxy.proc.poll() is None
