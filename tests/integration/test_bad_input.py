"""Bad input never crashes a service and never loses stored data."""

from __future__ import annotations

import msgspec
import pytest
from itest_support import Cluster, RawClient

from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    ErrorReply,
    GetRouteInfoRequest,
    PingRequest,
    PongReply,
    PullMessageRequest,
    SendMessageRequest,
    StorePutRequest,
)
from ferry.protocol.record import encode_properties, encode_record
from ferry.protocol.version import PROTOCOL_ID

GARBAGE: list[list[bytes]] = [
    [b"", b"\x00\x01garbage"],
    [b"", PROTOCOL_ID],  # truncated: no header
    [b"", PROTOCOL_ID, b"\xc1 not msgpack"],
    [b"", b"FERRY/7", b"{}"],
    [b"no delimiter"],
]
EXPECTED = {
    0: ResponseCode.BAD_FRAME,
    1: ResponseCode.BAD_FRAME,
    2: ResponseCode.BAD_FRAME,
    3: ResponseCode.VERSION_NOT_SUPPORTED,
    4: ResponseCode.BAD_FRAME,
}


def _clients(cluster: Cluster) -> dict[str, RawClient]:
    return {
        "namesrv": RawClient(cluster.namesrv),
        "broker-remoting": RawClient(cluster.broker_addr),
        "broker-store": RawClient(cluster.local.store_endpoint),
    }


@pytest.fixture
def seeded(cluster: Cluster) -> Cluster:
    with Producer("pg-seed", cluster.namesrv) as producer:
        for i in range(20):
            producer.send(Message("Kept", f"kept-{i}".encode()))
    return cluster


def _assert_error(body: object, code: int) -> None:
    assert isinstance(body, ErrorReply), body
    assert body.code == code, body


def _assert_nothing_lost(cluster: Cluster) -> None:
    with PullConsumer(
        "cg-check", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.subscribe("Kept")
        got: list[bytes] = []
        for _ in range(50):
            got += [m.body for m in consumer.poll(timeout=0.5)]
            if len(got) >= 20:
                break
    assert sorted(got) == sorted(f"kept-{i}".encode() for i in range(20))
    for sp in cluster.local.processes:
        assert sp.alive(), f"{sp.name} died:\n{sp.recent_output()}"


def test_garbage_frames_get_typed_errors_from_every_service(seeded: Cluster) -> None:
    clients = _clients(seeded)
    try:
        for name, client in clients.items():
            for i, frames in enumerate(GARBAGE):
                env, _ = client.send_raw(frames)
                _assert_error(env.body, EXPECTED[i])
            unknown = [b"", PROTOCOL_ID, msgspec.msgpack.encode({"id": 5, "body": {"t": "warp"}})]
            env, _ = client.send_raw(unknown)
            assert env.id == 5
            _assert_error(env.body, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
            body, _ = client.call(PingRequest())
            assert isinstance(body, PongReply), name
            assert body.service == name
    finally:
        for client in clients.values():
            client.close()
    _assert_nothing_lost(seeded)


def test_invalid_topics_and_oversized_messages_are_refused(seeded: Cluster) -> None:
    clients = _clients(seeded)
    big = encode_record(b"Kept", b"x" * (4 * 1024 * 1024 + 1), b"")
    small = encode_record(b"Kept", b"ok", encode_properties({"TAGS": "a"}))
    try:
        body, _ = clients["namesrv"].call(GetRouteInfoRequest("bad topic!"))
        _assert_error(body, ResponseCode.INVALID_PARAMETER)

        remoting = clients["broker-remoting"]
        body, _ = remoting.call(SendMessageRequest("pg", "bad topic!", -1), [small])
        _assert_error(body, ResponseCode.INVALID_PARAMETER)
        body, _ = remoting.call(SendMessageRequest("pg", "Kept", -1), [big])
        _assert_error(body, ResponseCode.MESSAGE_ILLEGAL)
        body, _ = remoting.call(SendMessageRequest("pg", "Kept", -1, count=2), [small])
        assert isinstance(body, ErrorReply)
        body, _ = remoting.call(SendMessageRequest("pg", "Kept", -1), [b"not a record at all"])
        assert isinstance(body, ErrorReply)
        body, _ = remoting.call(PullMessageRequest("cg", "NoSuchTopic", 0, 0))
        _assert_error(body, ResponseCode.TOPIC_NOT_EXIST)

        store = clients["broker-store"]
        body, _ = store.call(StorePutRequest("Kept", 0, 1), [big])
        _assert_error(body, ResponseCode.MESSAGE_ILLEGAL)
        body, _ = store.call(StorePutRequest("Kept", 0, 1), [small[:-3]])
        assert isinstance(body, ErrorReply)
        body, _ = store.call(StorePutRequest("Other", 0, 1), [small])  # topic mismatch
        assert isinstance(body, ErrorReply)
        body, _ = store.call(StorePutRequest("bad topic!", 0, 1), [small])
        _assert_error(body, ResponseCode.INVALID_PARAMETER)
    finally:
        for client in clients.values():
            client.close()
    _assert_nothing_lost(seeded)
