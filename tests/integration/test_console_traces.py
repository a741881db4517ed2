"""Out of the box, every message's trace is found by its msg_id: `ferry dev up` as the README
starts it (its services export to the console), the README tour run as written (no tracer set
up in the app), then each tour message looked up through the console's HTTP API; and each
message of a send_batch and of send_async's automatic batches, by its own id."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from itest_support import DevUp, wait_for
from opentelemetry.trace import NoOpTracerProvider
from test_readme import run_tour

from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REMOTING, STORE = "ferry-broker-remoting", "ferry-broker-store"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevUp]:
    up = DevUp(tmp_path_factory.mktemp("dev") / "data")
    try:
        yield up
    finally:
        up.close()


def message_path(console: str, msg_id: str) -> dict[str, Any]:
    url = f"{console}/api/trace/message/{urllib.parse.quote(msg_id, safe='')}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        found: dict[str, Any] = json.load(reply)
    return found


def names(span: dict[str, Any], msg_id: str) -> bool:
    """Whether a span names the message: its messaging.message.id, or a batch event's ids."""
    if span["attributes"].get("messaging.message.id") == msg_id:
        return True
    return any(
        msg_id in str(e["attributes"].get("ferry.batch.message_ids", "")).split(",")
        for e in span["events"]
    )


def broker_send(console: str, msg_id: str, topic: str) -> dict[str, Any]:
    """The broker's send span naming msg_id in the traces the console finds by it, once its
    trace also holds the store's append."""

    def find() -> dict[str, Any] | None:
        spans = message_path(console, msg_id)["spans"]
        send = next(
            (
                s
                for s in spans
                if (s["service"], s["name"]) == (REMOTING, f"send {topic}") and names(s, msg_id)
            ),
            None,
        )
        if send is None:
            return None
        stored = any(
            (s["service"], s["name"], s["trace_id"]) == (STORE, "store append", send["trace_id"])
            for s in spans
        )
        return send if stored else None

    found: dict[str, Any] = wait_for(find, 30, f"the broker's spans of {msg_id}")
    return found


def consume_all(namesrv: str, topic: str, count: int) -> list[MessageExt]:
    with PullConsumer(
        "trace-lookup", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(topic)
        got: list[MessageExt] = []

        def polled() -> bool:
            got.extend(consumer.poll(timeout=1.0))
            return len(got) >= count

        wait_for(polled, 30, f"{count} messages of {topic}")
    return got


def test_each_tour_message_is_found_by_its_msg_id(dev: DevUp, tmp_path: Path) -> None:
    namesrv, console = dev.fields["namesrv"], dev.fields["console"]
    done = run_tour(namesrv, tmp_path)
    first_id = done.stdout.splitlines()[0].split()[1]  # print(status, msg_id, ...)
    # hello, 10 of a batch, 3 of one order (a selector), the transaction's
    msgs = consume_all(namesrv, "TourTopic", 15)
    assert len(msgs) == 15 and first_id in {m.msg_id for m in msgs}
    for msg in msgs:
        send = broker_send(console, msg.msg_id, "TourTopic")
        assert send["attributes"]["messaging.system"] == "rocketmq"
        if msg.body.startswith(b"batch "):
            assert send["attributes"]["messaging.batch.message_count"] == 10
        else:
            assert send["attributes"]["messaging.message.id"] == msg.msg_id
    # the transaction's message: its commit is on the same path
    (paid,) = [m for m in msgs if m.body == b"paid order"]
    spans = message_path(console, paid.msg_id)["spans"]
    assert any(s["name"] == "end_transaction" and s["service"] == REMOTING for s in spans)
    # the HTML page the message page links to shows it too
    with urllib.request.urlopen(f"{console}/trace/message/{first_id}", timeout=30) as reply:
        page = reply.read().decode()
    assert "No span of this message" not in page and "send TourTopic" in page


def test_every_message_of_a_batch_is_found_by_its_own_id(dev: DevUp) -> None:
    namesrv, console = dev.fields["namesrv"], dev.fields["console"]
    # no client tracing (the SDK batches send_async only then): the broker's spans alone
    with Producer("trace-batches", namesrv, tracer_provider=NoOpTracerProvider()) as producer:
        result = producer.send_batch(
            [Message("TraceBatch", b"x" * 1024, tags=f"t{i}") for i in range(64)]
        )
        futures = [producer.send_async(Message("TraceAsync", f"a{i}".encode())) for i in range(200)]
        async_ids = [f.result(30).msg_id for f in futures]
    batch_ids = result.msg_ids
    assert len(set(batch_ids)) == 64
    sends = {broker_send(console, i, "TraceBatch")["span_id"] for i in batch_ids}
    assert len(sends) == 1  # one request, one span, every id findable
    send = broker_send(console, batch_ids[0], "TraceBatch")
    assert send["attributes"]["messaging.batch.message_count"] == 64
    (event,) = send["events"]
    assert event["name"] == "messages"
    assert event["attributes"]["ferry.batch.message_ids"].split(",") == batch_ids  # in order
    counts = [
        broker_send(console, i, "TraceAsync")["attributes"].get("messaging.batch.message_count", 1)
        for i in async_ids
    ]
    assert max(counts) > 1, "send_async batched nothing"
