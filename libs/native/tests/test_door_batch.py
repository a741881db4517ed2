"""The door's batch body as records in C (ferry.native.batch_records) against its Python
reference (ferry.remoting.door.send_records.batch_records_py), byte for byte; every batch the
reference refuses, the C code declines (None), so the Python code names the failure."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from ferry import native
from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError
from ferry.remoting.door import send_records
from ferry.remoting.door.send_records import batch_records_py, stored_sysflag

pytestmark = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")
ITEM = struct.Struct(">iIIii")  # total, magic, crc, flag, bodyLen
HOST = record.pack_host("10.1.2.3:40000")
NUMBERS: dict[str, Any] = {
    "queue_id": 3,
    "sysflag": 0x30 | 0x2,
    "born_timestamp": 1_796_222_671_265,
    "host": HOST,
    "reconsume_times": 1,
}
TOPICS = ["T", "BenchTopic", "t" * 255, "Tópico"]


def item(body: bytes, props: bytes, flag: int = 0, *, total_delta: int = 0) -> bytes:
    total = ITEM.size + len(body) + 2 + len(props) + total_delta
    return (
        ITEM.pack(total, 0xAABBCCDD, 0x12345678, flag, len(body))
        + body
        + len(props).to_bytes(2, "big")
        + props
    )


def random_props(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.2:
        return b""
    if kind < 0.25:  # at the most a RocketMQ client reads (a signed 16-bit length)
        return rng.randbytes(rng.choice([0x7FFF, 0x7FFE, 0x7FF0]))
    props = {"UNIQ_KEY": f"{rng.getrandbits(64):016X}", "WAIT": "true"}
    if rng.random() < 0.5:
        props["TAGS"] = rng.choice(["TagA", "näive", "x" * 300])
    return record.encode_properties(props)


def random_batch(rng: random.Random, most: int = 200) -> bytes:
    parts = []
    for _ in range(rng.randint(1, most)):
        body = b"" if rng.random() < 0.1 else rng.randbytes(rng.randint(1, 300))
        parts.append(item(body, random_props(rng), rng.randint(-(2**31), 2**31 - 1)))
    return b"".join(parts)


def by_c(topic: str, body: bytes | memoryview, **numbers: Any) -> tuple[bytes, int] | None:
    n = {**NUMBERS, **numbers}
    return native.batch_records(
        body,
        record.topic_tail(topic),
        max(n["queue_id"], 0),
        stored_sysflag(n["sysflag"]),
        n["born_timestamp"],
        n["host"],
        n["reconsume_times"],
    )


def by_py(topic: str, body: bytes, **numbers: Any) -> tuple[bytes, int]:
    return batch_records_py(topic, body, **{**NUMBERS, **numbers})


@pytest.mark.parametrize("seed", range(40))
def test_random_batches_are_the_same_records_byte_for_byte(seed: int) -> None:
    rng = random.Random(seed)
    topic = TOPICS[seed % len(TOPICS)]
    body = random_batch(rng)
    numbers = {"queue_id": rng.choice([-1, 0, 7]), "reconsume_times": rng.randint(0, 16)}
    got = by_c(topic, body, **numbers)
    assert got is not None
    assert got == by_py(topic, body, **numbers)
    frame, count = got
    assert stored(frame, topic) == items(body)
    assert count == len(items(body))


def items(body: bytes) -> list[tuple[int, bytes, bytes]]:
    """(flag, body, props) of each item of a well-formed batch body."""
    out, pos = [], 0
    while pos < len(body):
        total, _, _, flag, n_body = ITEM.unpack_from(body, pos)
        at = pos + ITEM.size + n_body
        out.append((flag, body[pos + ITEM.size : at], body[at + 2 : pos + total]))
        pos += total
    return out


def stored(frame: bytes, topic: str) -> list[tuple[int, bytes, bytes]]:
    """(flag, body, props) of each record, checking the head's numbers and the topic."""
    out, pos, raw = [], 0, topic.encode()
    while pos < len(frame):
        head = record.HEAD.unpack_from(frame, pos)
        size, magic, _, queue_id, flag, _, _, sysflag, born, host, _, _, reconsume, _, n_body = head
        assert magic == record.MAGIC and host == HOST and born == NUMBERS["born_timestamp"]
        assert sysflag == 0x2 and queue_id in (0, 3, 7) and reconsume >= 0
        at = pos + record.OFF_BODY + n_body
        assert frame[at] == len(raw) and frame[at + 1 : at + 1 + len(raw)] == raw
        props_at = at + 1 + len(raw)
        n_props = int.from_bytes(frame[props_at : props_at + 2], "big")
        assert props_at + 2 + n_props == pos + size
        out.append((flag, frame[pos + record.OFF_BODY : at], frame[props_at + 2 : pos + size]))
        pos += size
    return out


def test_one_item_of_an_empty_body_and_no_properties() -> None:
    body = item(b"", b"")
    frame, count = by_c("T", body) or (b"", 0)
    assert (frame, count) == by_py("T", body)
    assert count == 1 and len(frame) == record.FIXED_SIZE + 1


def test_a_memoryview_body_gives_the_same_bytes() -> None:
    body = random_batch(random.Random(99))
    assert by_c("T", memoryview(body)) == by_py("T", body)


def _malformed() -> dict[str, bytes]:
    good = item(b"body", b"K\x01v\x02")
    return {
        "empty": b"",
        "total one too many": item(b"body", b"K\x01v\x02", total_delta=1),
        "total one too few": item(b"body", b"K\x01v\x02", total_delta=-1),
        "total under the smallest item": ITEM.pack(21, 0, 0, 0, 0) + b"\x00",
        "total past the end": good + ITEM.pack(1 << 30, 0, 0, 0, 0) + b"\x00\x00",
        "negative total": ITEM.pack(-22, 0, 0, 0, 0) + b"\x00\x00",
        "negative body length": ITEM.pack(22, 0, 0, 0, -1) + b"\x00\x00",
        "body length past the item": ITEM.pack(26, 0, 0, 0, 5) + b"abcd\x00\x00",
        "negative property length": ITEM.pack(22 + 0x8000, 0, 0, 0, 0)
        + b"\x80\x00"
        + bytes(0x8000),
        "property length short of the total": ITEM.pack(25, 0, 0, 0, 0) + b"\x00\x02ab",
        "cut inside the head": good + good[:10],
        "cut inside the body": good + good[:-3],
        "a byte after the last item": good + b"\x00",
    }


@pytest.mark.parametrize("case", list(_malformed()))
def test_malformed_batches_are_left_to_the_python_code(case: str) -> None:
    body = _malformed()[case]
    assert by_c("T", body) is None
    with pytest.raises(MessageIllegalError):
        by_py("T", body)


@pytest.mark.parametrize(
    "numbers",
    [
        {"queue_id": 2**31},
        {"sysflag": -(2**31) - 1},
        {"born_timestamp": 2**63},
        {"born_timestamp": -(2**63) - 1},
        {"reconsume_times": 2**31},
        {"reconsume_times": 2**200},
    ],
)
def test_numbers_out_of_range_are_left_to_the_python_code(numbers: dict[str, int]) -> None:
    body = item(b"x", b"")
    assert by_c("T", body, **numbers) is None
    with pytest.raises(InvalidParameterError):
        by_py("T", body, **numbers)


def test_a_host_of_another_length_is_left_to_the_python_code() -> None:
    assert by_c("T", item(b"x", b""), host=HOST[:4]) is None
    assert by_c("T", item(b"x", b""), host=bytearray(HOST)) is None


def test_damaged_batches_are_taken_exactly_when_the_python_code_takes_them() -> None:
    rng = random.Random(5)
    taken = declined = 0
    for _ in range(2000):
        data = bytearray(random_batch(random.Random(rng.getrandbits(32)), 12))
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.5 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind < 0.7:
                del data[rng.randrange(len(data) + 1) :]
            elif kind < 0.85:  # a length field's top byte
                at = rng.randrange(len(data) + 1)
                data[at:at] = bytes([rng.choice([0x00, 0x7F, 0x80, 0xFF])])
            else:
                data += rng.randbytes(rng.randint(1, 30))
        body = bytes(data)
        got = by_c("T", body)
        try:
            want = by_py("T", body)
        except MessageIllegalError:
            assert got is None
            declined += 1
        else:
            assert got == want
            taken += 1
    assert taken > 0 and declined > 500


@pytest.mark.parametrize("use_native", [True, False])
def test_the_door_answers_the_same_with_or_without_c(
    use_native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "ENABLED", use_native)
    if not use_native:  # FERRY_NATIVE=0: the C function is never called
        monkeypatch.setattr(native, "batch_records", None)
    body = random_batch(random.Random(3))
    assert send_records.batch_records("T", body, **NUMBERS) == by_py("T", body)
    bad = _malformed()["total one too many"]
    with pytest.raises(MessageIllegalError) as raised:
        send_records.batch_records("T", bad, **NUMBERS)
    with pytest.raises(MessageIllegalError) as reference:
        by_py("T", bad)
    assert str(raised.value) == str(reference.value)
    with pytest.raises(InvalidParameterError):
        send_records.batch_records("T", body, **{**NUMBERS, "queue_id": 2**31})
