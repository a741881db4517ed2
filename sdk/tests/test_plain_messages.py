"""The SDK's per-message helpers in C against their Python references: plain_message,
plain_messages, the SendResults of a batch and send_batch's joined offset ids."""

from __future__ import annotations

import gc
import sys

import pytest

from ferry import native
from ferry.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from ferry.client.message_encode import (
    MAX_PLAIN_TEXT,
    plain_message,
    plain_message_py,
    plain_messages,
)
from ferry.client.outgoing import each_result_py, offset_ids
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import SendMessageReply

needs_c = pytest.mark.skipif(not native.ENABLED, reason="the C extension is not built here")


def variants() -> list[Message]:
    odd_body = Message("T", b"x")
    odd_body.body = bytearray(b"abc")  # type: ignore[assignment]  # a caller's late change
    odd_keys = Message("T", b"x")
    odd_keys.keys = ("a", "b")  # type: ignore[assignment]
    return [
        Message("T", b""),
        Message("T", b"x" * 1024),
        Message("T", "text body"),
        Message("T", b"b", tags="TagA"),
        Message("T", b"b", tags=""),
        Message("T", b"b", tags="\u00e9t\u00e9 \u2603"),  # UTF-8 longer than its characters
        Message("T", b"b", keys="one"),
        Message("T", b"b", keys=["k1", "k2", "\u00fc"]),
        Message("T", b"b", keys=["", ""]),
        Message("T", b"b", tags="t", keys=["k"]),
        Message("T", b"b", properties={"a": "1"}),
        Message("T", b"b", delay_level=3),
        Message("T", b"b", delay_level=-1),
        Message("T", b"b", delay_level=10**30),  # past a C long: the general path decides
        Message("T", b"b", deliver_at_ms=1),
        Message("T", b"b", tags="x" * (MAX_PLAIN_TEXT + 1)),
        Message("T", b"b", keys=["k" * (MAX_PLAIN_TEXT // 2), "k" * (MAX_PLAIN_TEXT // 2)]),
        MessageExt("T", b"ext", tags="TagB", keys=["e"]),
        odd_body,
        odd_keys,
    ]


@needs_c
@pytest.mark.parametrize("index", range(len(variants())))
@pytest.mark.parametrize("tail_len", [1, 30])
def test_c_makes_what_python_makes(index: int, tail_len: int) -> None:
    msg = variants()[index]
    expected = plain_message_py(msg, tail_len)
    got = plain_message(msg, tail_len)
    assert got == expected
    assert type(got) is type(expected)
    assert plain_messages([msg, msg], "T", tail_len) == (
        None if expected is None else [expected, expected]
    )


@pytest.mark.parametrize("bad", [{"tags": "a\x01b"}, {"keys": ["ok", "b\x02"]}])
def test_a_separator_in_tags_or_keys_is_refused_with_its_reason(bad: dict[str, object]) -> None:
    msg = Message("T", b"b", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="reserved separator"):
        plain_message(msg, 1)
    with pytest.raises(InvalidParameterError, match="reserved separator"):
        plain_messages([Message("T", b"ok"), msg], "T", 1)


def test_a_batch_with_another_topic_or_a_delay_is_left_to_the_general_path() -> None:
    plain = [Message("T", b"a"), Message("T", b"b")]
    assert plain_messages(plain, "T", 1) is not None
    assert plain_messages([*plain, Message("U", b"c")], "T", 1) is None
    assert plain_messages([*plain, Message("T", b"c", delay_level=2)], "T", 1) is None
    assert plain_messages(plain, "U", 1) is None


@needs_c
@pytest.mark.parametrize("count", [2, 256])
def test_send_results_in_c_are_the_python_ones(count: int) -> None:
    ids = [f"{i:032X}" for i in range(count)]
    phys = [i * 1_100 + (1 << 40) for i in range(count)]  # offsets past 32 bits
    queue = MessageQueue("T", "broker-a", 3)
    made = native.send_results(SendResult, SendStatus.FLUSH_DISK_TIMEOUT, ids, phys, "AB", queue, 7)
    assert made == each_result_py(ids, phys, SendStatus.FLUSH_DISK_TIMEOUT, "AB", queue, 7)
    assert made[1].offset_msg_id == f"AB{phys[1]:016X}"
    assert [r.queue_offset for r in made] == list(range(7, 7 + count))
    with pytest.raises(ValueError, match="one offset per id"):
        native.send_results(SendResult, SendStatus.SEND_OK, ids, phys[:-1], "AB", queue, 0)


@needs_c
@pytest.mark.parametrize("count", [0, 1, 2, 256])
def test_joined_offset_ids_in_c_are_the_python_ones(count: int) -> None:
    phys = [i * 1_100 + (1 << 40) for i in range(count)] + ([(1 << 63) - 1] if count else [])
    reply = SendMessageReply(0, 0, 0, "127.0.0.1:10911", phys)
    prefix = "7F00000100002A9F"
    assert native.joined_offset_ids(prefix, phys) == ",".join(f"{prefix}{p:016X}" for p in phys)
    host = offset_ids(reply)[0][:16] if phys else prefix
    assert native.joined_offset_ids(host, phys) == ",".join(offset_ids(reply))
    # what the Python format would spell otherwise is left to it
    assert native.joined_offset_ids(prefix, [*phys, -1]) is None
    assert native.joined_offset_ids(prefix, [*phys, 1 << 64]) is None
    with pytest.raises(ValueError, match="not ASCII"):
        native.joined_offset_ids("hôte", phys)


class _Text(str):
    """A str subclass: its instances have a __dict__, so they could close a cycle."""


@needs_c
def test_snapshots_and_results_are_out_of_the_collectors_sight_and_still_freed() -> None:
    body = b"payload" * 100
    base = sys.getrefcount(body)
    snaps = plain_messages([Message("T", body, tags="t", keys=["k"]) for _ in range(3)], "T", 1)
    assert snaps is not None
    assert not any(gc.is_tracked(s) for s in snaps)  # full collections no longer walk them
    assert sys.getrefcount(body) == base + 3
    del snaps  # reference counting alone frees them
    assert sys.getrefcount(body) == base
    odd = plain_message(Message("T", body, tags=_Text("t")), 1)
    assert odd is not None and gc.is_tracked(odd)  # a str subclass keeps the collector
    queue = MessageQueue("T", "broker-a", 0)
    made = native.send_results(SendResult, SendStatus.SEND_OK, ["A", "B"], [1, 2], "AB", queue, 0)
    assert not any(gc.is_tracked(r) for r in made)
    held = sys.getrefcount(queue)
    del made
    assert sys.getrefcount(queue) == held - 2
