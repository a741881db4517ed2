"""The SDK's C loops (ferry.native) against their Python references: the consumer's frame
decoder (field by field with decode_message too, on plain records and on the ones it hands to
Python: compressed, delayed, blank tails, malformed) and the plain-batch encoder (byte for
byte)."""

from __future__ import annotations

import gc
import random
import sys
import zlib

import pytest

from ferry import native
from ferry.client import message_decode, message_encode
from ferry.client.message import MessageExt, MessageQueue, PlainMessage
from ferry.client.message_decode import decode_message, decode_records_py
from ferry.client.message_encode import encode_plain_batch_py
from ferry.protocol import record

pytestmark = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")


def stored(i: int, rng: random.Random) -> bytes:
    props: dict[str, str] = {}
    if rng.random() < 0.9:
        props["UNIQ_KEY"] = f"{rng.getrandbits(96):024X}"
    props["TAGS"] = rng.choice(["", "TagA", "TagB", "é"])
    if rng.random() < 0.5:
        props["KEYS"] = rng.choice(["k1", "k1 k2", " a  b "])
    if rng.random() < 0.1:
        props["DELAY"] = "3"
    if rng.random() < 0.1:
        props["TIMER_DELIVER_MS"] = "1700000000999"
    if rng.random() < 0.2:
        props["traceparent"] = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    body = rng.randbytes(rng.randint(0, 300))
    sysflag = 0
    if rng.random() < 0.1:
        body, sysflag = zlib.compress(body), record.SYSFLAG_COMPRESSED
    raw = bytearray(
        record.encode_record(
            rng.choice([b"Orders", b"%RETRY%g"]),
            body,
            record.encode_properties(props),
            sysflag=sysflag,
            flag=rng.randint(-3, 3),
            born_timestamp=1_700_000_000_000 + i,
            born_host=record.pack_host(f"10.0.0.{rng.randint(1, 3)}:{rng.randint(1, 9)}"),
            reconsume_times=rng.randint(0, 2),
            queue_id=rng.choice([0, 1]),
        )
    )
    record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, i, 4096 + 1000 * i)
    record.STORE_STAMP.pack_into(
        raw, record.OFF_STORE_STAMP, 1_700_000_001_000 + i, record.pack_host("10.9.9.9:10911")
    )
    return bytes(raw)


def frame(seed: int, n: int = 120) -> bytes:
    rng = random.Random(seed)
    out = bytearray()
    for i in range(n):
        out += stored(i, rng)
        if rng.random() < 0.03:
            out += record.PREFIX.pack(16, record.BLANK_MAGIC) + bytes(8)  # a segment tail
    return bytes(out)


def fields(msgs: list[MessageExt]) -> list[tuple[object, ...]]:
    return [m._fields() for m in msgs]


@pytest.mark.parametrize("tags", [None, frozenset({"TagA"}), frozenset({"TagB", "é"})])
@pytest.mark.parametrize("seed", range(4))
def test_c_decoder_matches_python_and_decode_message(
    seed: int, tags: frozenset[str] | None
) -> None:
    buf = frame(seed)
    by_c: list[MessageExt] = []
    message_decode.decode_records(buf, "broker-a", tags, by_c)
    by_py: list[MessageExt] = []
    assert decode_records_py(buf, "broker-a", tags, by_py) == len(buf)
    assert fields(by_c) == fields(by_py)
    assert by_c and len({m.queue.queue_id for m in by_c}) == 2
    if tags is None:  # every record, as the general decoder makes it
        reference = [decode_message(r, "broker-a") for r in record.iter_records(buf)]
        assert fields(by_c) == fields(reference)
        assert any(m.sysflag & record.SYSFLAG_COMPRESSED for m in by_c)
        assert any(m.delay_level == 3 for m in by_c)


def test_c_decoder_alone_takes_plain_records_to_the_end() -> None:
    rng = random.Random(7)
    records = [stored(i, rng) for i in range(80)]
    plain = b"".join(  # without what the C decoder leaves to Python
        raw
        for raw in records
        if not {"DELAY", "TIMER_DELIVER_MS"} & next(record.iter_records(raw)).properties.keys()
        and not next(record.iter_records(raw)).sysflag & record.SYSFLAG_COMPRESSED
    )
    out: list[MessageExt] = []
    stopped = native.decode_records(
        plain, 0, "b", None, out, MessageExt, MessageQueue,
        record.topic_of, record.unpack_host, message_decode._host_info,
    )  # fmt: skip
    assert stopped == len(plain)
    assert len(out) > 40
    assert fields(out) == fields([decode_message(r, "b") for r in record.iter_records(plain)])


def test_c_decoded_messages_stay_out_of_the_collector_and_go_by_refcount() -> None:
    rng = random.Random(3)
    body = b"held by the test" * 4
    raw = bytearray(stored(0, rng))
    plain = record.encode_record(b"Orders", body, record.encode_properties({"KEYS": "k1 k2"}))
    out: list[MessageExt] = []
    message_decode.decode_records(plain * 50, "b", None, out)
    assert len(out) == 50 and out[0].keys == ["k1", "k2"]
    # young collections no longer walk them (nor their key lists): bench/gc_cost.py
    assert not any(gc.is_tracked(m) or gc.is_tracked(m.keys) for m in out)
    keys = out[0].keys
    base = sys.getrefcount(keys)
    out.clear()  # reference counting alone frees them and what they hold
    assert sys.getrefcount(keys) == base - 1
    by_py: list[MessageExt] = []
    decode_records_py(bytes(raw), "b", None, by_py)
    assert by_py and gc.is_tracked(by_py[0])  # the Python reference path leaves them be


@pytest.mark.parametrize("cut", [1, 10, 90])
def test_a_truncated_frame_raises_after_the_good_records(cut: int) -> None:
    buf = frame(1, 10)
    out: list[MessageExt] = []
    with pytest.raises(record.RecordError):
        message_decode.decode_records(buf[:-cut], "b", None, out)
    assert 0 < len(out) < 10 or cut >= 90


@pytest.mark.parametrize("compress_over", [-1, 4096, 100])
def test_c_batch_encoder_writes_the_python_bytes(compress_over: int) -> None:
    rng = random.Random(compress_over)
    msgs = [
        PlainMessage(
            rng.randbytes(rng.choice([0, 10, 1000, 5000])),
            rng.choice(["", "TagA", "étiquette"]),
            rng.choice(["", "k1", "k1 k2", "clé"]),
            0,
        )
        for _ in range(60)
    ]
    ids = [f"{rng.getrandbits(128):032X}" for _ in msgs]
    host = record.pack_host("10.0.0.7:0")
    args = ("Orders", msgs, ids)
    kwargs = {
        "born_timestamp": 1_700_000_000_000,
        "born_host": host,
        "compress_over": compress_over,
    }
    expected = encode_plain_batch_py(*args, **kwargs)  # type: ignore[arg-type]
    assert message_encode.encode_plain_batch(*args, **kwargs) == expected  # type: ignore[arg-type]
    direct = native.encode_plain_batch(
        record.topic_tail("Orders"), msgs, ids, 1_700_000_000_000, host, compress_over
    )
    if compress_over < 0 or all(len(m.body) <= compress_over for m in msgs):
        assert direct == expected  # nothing to compress: the C encoder wrote it
    else:
        assert direct is None  # a body to compress: left to Python
    assert [r.properties["UNIQ_KEY"] for r in record.iter_records(expected)] == ids
