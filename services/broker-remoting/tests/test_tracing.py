"""broker-remoting continues the client's trace on send and pull (console exporter)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import zmq

from ferry.protocol.framing import RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    AnyRequest,
    PullMessageReply,
    PullMessageRequest,
    SendMessageReply,
    SendMessageRequest,
)
from ferry.protocol.record import encode_properties, encode_record
from ferry.runtime.launcher import LocalCluster, start_broker_services

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"


def spans_in(output: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporter printed, one per span."""
    spans: list[dict[str, Any]] = []
    chunk: list[str] = []
    for line in output.splitlines():
        if line == "{":
            chunk = [line]
        elif chunk:
            chunk.append(line)
            if line == "}":
                spans.append(json.loads("\n".join(chunk)))
                chunk = []
    return spans


def call(
    sock: zmq.Socket[Any],
    codec: RequestCodec,
    rid: int,
    body: AnyRequest,
    payload: list[bytes] | None = None,
) -> Any:
    env = RequestEnvelope(rid, body, traceparent=TRACEPARENT)
    sock.send_multipart(codec.request_frames(env, payload))
    assert sock.poll(10_000), "no reply in time"
    reply, _ = codec.decode_reply(sock.recv_multipart()[1:])
    return reply.body


def test_send_and_pull_spans_are_children_of_the_client_span(tmp_path: Path) -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    with LocalCluster() as cluster:
        start_broker_services(
            cluster,
            str(tmp_path),
            namesrv_addr="127.0.0.1:1",
            env=env,
            overrides={
                "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
                "mappedFileSizeConsumeQueue": str(20 * 10_000),
            },
        )
        ctx: zmq.Context[Any] = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(f"tcp://{cluster.broker_addr}")
        codec = RequestCodec()
        try:
            records = [encode_record(b"Traced", b"x", encode_properties({})) for _ in range(2)]
            sent = call(
                sock,
                codec,
                1,
                SendMessageRequest("pg", "Traced", 0, count=2, default_topic="TBW102"),
                [b"".join(records)],
            )
            assert isinstance(sent, SendMessageReply)
            pulled = call(sock, codec, 2, PullMessageRequest("tracer-group", "Traced", 0, 0))
            assert isinstance(pulled, PullMessageReply)
        finally:
            sock.close()
            ctx.term()
        remoting = cluster.get("broker-remoting")
        assert remoting.stop() == 0  # stopping flushes the exporter
        spans = {s["name"]: s for s in spans_in(remoting.recent_output())}

    send_span = spans["send Traced"]
    assert send_span["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert send_span["parent_id"] == f"0x{CLIENT_SPAN_ID}"
    assert send_span["kind"] == "SpanKind.SERVER"
    assert send_span["attributes"]["messaging.system"] == "rocketmq"
    assert send_span["attributes"]["messaging.destination.name"] == "Traced"
    assert send_span["attributes"]["messaging.batch.message_count"] == 2
    assert send_span["attributes"]["messaging.destination.partition.id"] == "0"

    pull_span = spans["pull Traced"]
    assert pull_span["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert pull_span["parent_id"] == f"0x{CLIENT_SPAN_ID}"
    assert pull_span["attributes"]["messaging.consumer.group.name"] == "tracer-group"
