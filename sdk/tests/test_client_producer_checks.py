"""What a producer refuses before anything goes on the wire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ferry.client import FerryError, Message, Producer
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError

NOWHERE = "127.0.0.1:9"  # nothing listens; none of these tests sends a request


@pytest.fixture
def producer() -> Iterator[Producer]:
    with Producer("checks", NOWHERE, max_message_size=10_000) as p:
        yield p


def test_batch_over_max_message_size_is_refused(producer: Producer) -> None:
    with pytest.raises(MessageIllegalError, match="over 10000"):
        producer.send_batch([Message("t", b"x" * 1000) for _ in range(10)])


def test_body_over_max_message_size_is_refused(producer: Producer) -> None:
    with pytest.raises(MessageIllegalError):
        producer.send(Message("t", b"x" * 10_001))


def test_batch_needs_one_topic_and_no_delay(producer: Producer) -> None:
    with pytest.raises(InvalidParameterError, match="same topic"):
        producer.send_batch([Message("a", b"x"), Message("b", b"x")])
    with pytest.raises(InvalidParameterError, match="delayed"):
        producer.send_batch([Message("a", b"x", delay_level=2)])
    with pytest.raises(InvalidParameterError):
        producer.send_batch([])


def test_invalid_topic_names_are_refused(producer: Producer) -> None:
    with pytest.raises(InvalidParameterError):
        producer.send(Message("bad topic!", b"x"))
    with pytest.raises(InvalidParameterError):
        producer.send_async(Message("", b"x"))


def test_reserved_separator_in_a_property_is_refused(producer: Producer) -> None:
    with pytest.raises(InvalidParameterError, match="reserved separator"):
        producer.send_oneway(Message("t", b"x", properties={"k": "v\x01"}))


def test_a_producer_must_be_started() -> None:
    p = Producer("g", NOWHERE)
    with pytest.raises(FerryError, match="not started"):
        p.send(Message("t", b"x"))
    p.start()
    p.shutdown()
    with pytest.raises(FerryError, match="not started"):
        p.send(Message("t", b"x"))


def test_bad_group_and_namesrv_are_refused_at_construction() -> None:
    with pytest.raises(InvalidParameterError):
        Producer("bad group", NOWHERE)
    with pytest.raises(InvalidParameterError):
        Producer("g", "")
