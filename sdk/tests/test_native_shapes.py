"""The SDK hands ferry.native its classes' shapes (bind_sdk): the names it hands over cover
every slot and field, and the C code follows what it is handed, not a shape of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from ferry import native
from ferry.client.message import (
    NATIVE_MESSAGE_FIELDS,
    NATIVE_PLAIN_FIELDS,
    NATIVE_RESULT_FIELDS,
    Message,
    MessageExt,
    MessageQueue,
    PlainMessage,
    SendResult,
    SendStatus,
    _all_slots,
)
from ferry.client.message_encode import _BASE_SIZE, MAX_PLAIN_TEXT, plain_message_py

needs_c = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")


def bind(plain_cls: type[tuple[object, ...]]) -> None:
    fields: tuple[str, ...] = getattr(plain_cls, "_fields")  # noqa: B009 - a NamedTuple's
    native.bind_sdk(
        NATIVE_MESSAGE_FIELDS,
        NATIVE_RESULT_FIELDS,
        tuple(fields.index(name) for name in NATIVE_PLAIN_FIELDS),
    )


@pytest.fixture
def rebinds() -> Iterator[None]:
    yield
    bind(PlainMessage)  # what ferry.client.message bound at import


def test_the_names_handed_over_cover_every_slot_and_field() -> None:
    assert len(set(NATIVE_MESSAGE_FIELDS)) == len(NATIVE_MESSAGE_FIELDS) == 20
    assert set(NATIVE_MESSAGE_FIELDS) == set(_all_slots(MessageExt))
    assert set(NATIVE_MESSAGE_FIELDS[:7]) == set(_all_slots(Message))
    assert set(NATIVE_RESULT_FIELDS) == {f.name for f in dataclasses.fields(SendResult)}
    assert sorted(NATIVE_PLAIN_FIELDS) == sorted(PlainMessage._fields)


class Reordered(NamedTuple):
    size: int
    keys: str
    body: bytes
    tags: str


@needs_c
@pytest.mark.usefixtures("rebinds")
def test_the_c_code_fills_the_positions_it_is_handed() -> None:
    bind(Reordered)
    msg = Message("T", b"payload", tags="TagA", keys=["k1", "k2"])
    made = native.plain_message(msg, _BASE_SIZE + 2, MAX_PLAIN_TEXT, Reordered)
    expected = plain_message_py(msg, 2)
    assert expected is not None
    assert made == Reordered(expected.size, "k1 k2", b"payload", "TagA")
    records = native.encode_plain_batch(b"\x01T", [made], ["0" * 32], 1, bytes(8), -1)
    bind(PlainMessage)
    assert records == native.encode_plain_batch(b"\x01T", [expected], ["0" * 32], 1, bytes(8), -1)


@needs_c
@pytest.mark.usefixtures("rebinds")
@pytest.mark.parametrize(
    ("message", "result", "plain"),
    [
        (NATIVE_MESSAGE_FIELDS[:-1], NATIVE_RESULT_FIELDS, (0, 1, 2, 3)),
        (NATIVE_MESSAGE_FIELDS, (*NATIVE_RESULT_FIELDS[:4], 5), (0, 1, 2, 3)),
        (NATIVE_MESSAGE_FIELDS, NATIVE_RESULT_FIELDS, (0, 1, 1, 3)),
        (NATIVE_MESSAGE_FIELDS, NATIVE_RESULT_FIELDS, (0, 1, 2, 4)),
        (NATIVE_MESSAGE_FIELDS, NATIVE_RESULT_FIELDS, (0, 1, 2)),
    ],
)
def test_a_bad_shape_is_refused_and_the_last_one_kept(
    message: tuple[str, ...], result: tuple[str, ...], plain: tuple[int, ...]
) -> None:
    with pytest.raises((ValueError, TypeError)):
        native.bind_sdk(message, result, plain)
    queue = MessageQueue("T", "b", 0)
    made = native.send_results(SendResult, SendStatus.SEND_OK, ["A"], [16], "AB", queue, 3)
    assert made == [SendResult(SendStatus.SEND_OK, "A", "AB0000000000000010", queue, 3)]
