"""The message ids a traced send puts on its span: found in the records without decoding them,
and exactly when a body or another property looks like the key."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.protocol.record import encode_properties, encode_record
from ferry.remoting.send_span import BATCH_EVENT, BATCH_IDS, add_message_ids, record_ids


def rec(body: bytes, props: dict[str, str]) -> bytes:
    return encode_record(b"SpanTopic", body, encode_properties(props))


def test_the_ids_of_a_batch_come_out_in_record_order() -> None:
    ids = [f"{i:032X}" for i in range(5)]
    frame = b"".join(rec(b"x" * 100, {"TAGS": "A", "UNIQ_KEY": i}) for i in ids)
    assert record_ids(frame, 5) == ",".join(ids)
    assert record_ids(memoryview(frame), 5) == ",".join(ids)


def test_a_body_or_a_key_that_looks_like_uniq_key_is_not_taken_for_an_id() -> None:
    fake = b"UNIQ_KEY\x01FAKEFAKE\x02"
    frame = rec(fake, {"UNIQ_KEY": "REAL-1"}) + rec(
        b"plain", {"MY_UNIQ_KEY": "no", "UNIQ_KEY": "R2"}
    )
    assert record_ids(frame, 2) == "REAL-1,R2"
    # a record without UNIQ_KEY keeps its place; a truncated frame stops the walk
    frame = rec(b"a", {"TAGS": "T"}) + rec(b"b", {"UNIQ_KEY": "R3"})
    assert record_ids(frame, 2) == ",R3"
    assert record_ids(frame[:-5], 2) == ""


def spans_of(frame: bytes, count: int, given: str = "") -> dict[str, object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("send SpanTopic")
    add_message_ids(span, frame, count, given)
    span.end()
    (done,) = exporter.get_finished_spans()
    events = {e.name: dict(e.attributes or {}) for e in done.events}
    return {"attributes": dict(done.attributes or {}), "events": events}


def test_one_message_gets_the_attribute_and_a_batch_one_event() -> None:
    one = spans_of(rec(b"hi", {"UNIQ_KEY": "ONE"}), 1)
    assert one == {"attributes": {"messaging.message.id": "ONE"}, "events": {}}
    batch = spans_of(rec(b"a", {"UNIQ_KEY": "A1"}) + rec(b"b", {"UNIQ_KEY": "B2"}), 2)
    assert batch == {"attributes": {}, "events": {BATCH_EVENT: {BATCH_IDS: "A1,B2"}}}
    # garbage gives no event and no error
    assert spans_of(b"\x00" * 10, 3) == {"attributes": {}, "events": {}}


def test_ids_the_producer_sent_are_taken_as_they_are() -> None:
    frame = rec(b"a", {"UNIQ_KEY": "A1"}) + rec(b"b", {"UNIQ_KEY": "B2"})
    batch = spans_of(frame, 2, given="G1,G2")
    assert batch["events"] == {BATCH_EVENT: {BATCH_IDS: "G1,G2"}}
    assert spans_of(rec(b"a", {"UNIQ_KEY": "A1"}), 1, given="G1")["attributes"] == {
        "messaging.message.id": "G1"
    }
