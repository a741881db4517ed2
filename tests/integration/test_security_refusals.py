"""Every request type of the protocol, on every port of a secure cluster, is refused three ways
and changes nothing (issue 27).

The list of types comes from the protocol's request union (request_types()), so a request
added later is covered without anyone remembering to add it here. Each is sent to every
request port (name server, remoting, store, index, scheduler, check-back, HA, controller):
  - unsigned: AUTH_NO_CREDENTIALS;
  - signed with a wrong secret, as a user and as the cluster's own services: AUTH_BAD_SIGNATURE
    (an internal port knows no users: there any key but the services' is NO_PERMISSION);
  - signed correctly by a Normal user with no ACL: NO_PERMISSION, naming what was missing
    (on an internal port: that it serves only the cluster's own services).
Stored data, offsets, metadata and users read the same before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import wait_for
from security_support import (
    GROUP,
    INNER,
    NOBODY,
    ROOT,
    TOPIC,
    WRONG,
    SecureCluster,
    ask,
    code_of,
    sample,
    start_secure,
    state,
)

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.auth import Credentials
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    ErrorReply,
    GetAllTopicConfigRequest,
    PingRequest,
    StoreStatusRequest,
    UpdateConsumerOffsetRequest,
    request_types,
)
from ferry.protocol.messages.common import OffsetEntry
from ferry.runtime.security import permissions

INNER_WRONG = Credentials(INNER.access_key, "not-the-secret")
INTERNAL_PORTS = {"broker-store", "index", "scheduler", "checkback", "ha-replicator"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    c = start_secure(Path(tmp_path_factory.mktemp("secure")))
    try:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, 2, 2, broker_addr=c.cluster.broker_addr)
            admin.create_user(NOBODY.access_key, NOBODY.secret_key, "Normal")
        with Producer("pg", c.namesrv, credentials=ROOT) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        # offset 0: a sample commit (offset 1) that got through would show in state()
        commit = UpdateConsumerOffsetRequest(GROUP, [OffsetEntry(TOPIC, 0, 0)])
        ask(c.ports()["broker-remoting"], commit, INNER)
        # name servers and controllers know users once a master pushed them
        for name in ("namesrv", "controller"):
            wait_for(
                lambda n=name: (
                    code_of(ask(c.ports()[n], PingRequest(), NOBODY)) == ResponseCode.NO_PERMISSION
                ),
                timeout=20,
                what=f"{name} to know user nobody",
            )
        yield c
    finally:
        c.stop()


def test_every_request_type_is_refused_on_every_port(
    secure: SecureCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    types = request_types()
    ports = secure.ports()
    assert set(ports) >= {
        "namesrv",
        "broker-remoting",
        "broker-store",
        "index",
        "scheduler",
        "checkback",
        "ha-replicator",
        "controller",
    }
    before = state(secure)
    failures = []
    calls = 0
    for request_type in types:
        body = sample(request_type)
        need = permissions.needs(body, "DefaultCluster")
        assert need, f"{request_type.__name__}: the sample needs no permission at all"
        for port, endpoint in ports.items():
            internal = port in INTERNAL_PORTS
            for creds, expected in (
                (None, ResponseCode.AUTH_NO_CREDENTIALS),
                (
                    WRONG,
                    ResponseCode.NO_PERMISSION if internal else ResponseCode.AUTH_BAD_SIGNATURE,
                ),
                (INNER_WRONG, ResponseCode.AUTH_BAD_SIGNATURE),
                (NOBODY, ResponseCode.NO_PERMISSION),
            ):
                reply = ask(endpoint, body, creds)
                calls += 1
                if code_of(reply) != expected:
                    who = creds.access_key if creds else "no credentials"
                    failures.append(f"{request_type.__name__} on {port} as {who}: {reply}")
    assert failures == []
    assert state(secure) == before
    with capsys.disabled():
        print(
            f"\nsecurity refusals: {len(types)} request types x {len(ports)} ports x 4 = "
            f"{calls} calls refused, nothing changed"
        )


def test_a_refusal_names_the_missing_permission(secure: SecureCluster) -> None:
    ports = secure.ports()
    body = sample(next(t for t in request_types() if t.__name__ == "SendMessageRequest"))
    reply = ask(ports["broker-remoting"], body, NOBODY)
    assert isinstance(reply, ErrorReply) and reply.code == ResponseCode.NO_PERMISSION
    assert "Pub" in reply.message and f"Topic:{TOPIC}" in reply.message
    assert not reply.retriable
    reply = ask(ports["broker-store"], StoreStatusRequest(), ROOT)
    assert code_of(reply) == ResponseCode.NO_PERMISSION
    assert "only the cluster's own services" in reply.message


def test_only_the_cluster_may_sign_a_header_alone(secure: SecureCluster) -> None:
    """The services sign their hops inside the cluster over the header only (the payload was
    checked where it came in); a user's request must sign its payload too."""
    from itest_support import RawClient

    from ferry.protocol.framing import RequestCodec

    body = sample(next(t for t in request_types() if t.__name__ == "SendMessageRequest"))
    client = RawClient(secure.ports()["broker-remoting"])
    try:
        for creds, expected in ((ROOT, ResponseCode.AUTH_BAD_SIGNATURE), (INNER, 0)):
            client.codec = RequestCodec(creds, sign_payload=False)
            reply, _ = client.call(GetAllTopicConfigRequest())
            assert code_of(reply) == expected, (creds.access_key, reply)
        client.codec = RequestCodec(ROOT, sign_payload=False)
        reply, _ = client.call(body, [b"not a record"])
        assert code_of(reply) == ResponseCode.AUTH_BAD_SIGNATURE
        assert "must cover the payload" in reply.message
    finally:
        client.close()
