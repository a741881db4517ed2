"""Damaged input through every C loop: random byte flips and cuts of valid frames. The C code
must never read outside its buffer (a crash ends the test run), and where it answers, it must
answer what the Python reference answers; where it declines (None), the Python code decides."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from ferry import native
from ferry.client import message_decode
from ferry.client.message import MessageExt
from ferry.index import keys
from ferry.protocol import record
from ferry.store.batch import scan_batch_py

pytestmark = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")
ROUNDS = 1500
CQ_HEAD = struct.Struct(">qi")  # a ConsumeQueue entry's log offset and size


def frame(rng: random.Random) -> tuple[bytes, int]:
    out = bytearray()
    n = rng.randint(1, 6)
    for i in range(n):
        props = {"UNIQ_KEY": f"ID{i}", "TAGS": rng.choice(["A", "B"]), "KEYS": "k1 k2"}
        raw = bytearray(
            record.encode_record(
                b"T", rng.randbytes(rng.randint(0, 40)), record.encode_properties(props)
            )
        )
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, i, len(out))
        out += raw
    return bytes(out), n


def damaged(rng: random.Random) -> tuple[bytes, int]:
    buf, n = frame(rng)
    data = bytearray(buf)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.6 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind < 0.8:
            del data[rng.randrange(len(data) + 1) :]
        else:
            data += rng.randbytes(rng.randint(1, 30))
    return bytes(data), n


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return ("error", type(exc).__name__)


def test_store_scan_on_damaged_puts() -> None:
    rng = random.Random(11)
    for _ in range(ROUNDS):
        data, n = damaged(rng)
        got = native.scan_batch(data, n, b"T", 1 << 20, 1 << 30, record.tags_code)
        if got is not None:
            assert ("ok", tuple(scan_batch_py(data, n, b"T", 1 << 20, 1 << 30))) == ("ok", got)


def test_index_scan_on_damaged_logs() -> None:
    rng = random.Random(12)
    for _ in range(ROUNDS):
        data, _ = damaged(rng)
        got = native.indexed_records(data)
        if got is not None:
            assert outcome(keys.indexed_records_py, data) == ("ok", got)


def test_consumer_decode_on_damaged_frames() -> None:
    rng = random.Random(13)
    for _ in range(ROUNDS):
        data, _ = damaged(rng)
        by_c: list[MessageExt] = []
        by_py: list[MessageExt] = []
        c = outcome(message_decode.decode_records, data, "b", None, by_c)
        py = outcome(message_decode.decode_records_py, data, "b", None, by_py)
        assert c[0] == py[0]
        assert [m._fields() for m in by_c] == [m._fields() for m in by_py]


def test_pull_ranges_on_garbage_entries() -> None:
    """ConsumeQueue entries of random bytes (extreme offsets and sizes, a torn last entry):
    the ranges stay inside the log and the limits hold, and the walk stops at the first
    entry that is not inside the log."""
    rng = random.Random(13)
    for _ in range(ROUNDS):
        raw = bytearray(rng.randbytes(20 * rng.randint(0, 12) + rng.choice([0, 0, 7])))
        for at in range(0, len(raw) - 19, 20):
            if rng.random() < 0.6:  # a plausible entry among the garbage
                raw[at : at + 12] = CQ_HEAD.pack(rng.randint(0, 5000), rng.randint(1, 900))
        log_end = rng.choice([0, 6000, (1 << 63) - 1])
        max_msgs, max_bytes = rng.randint(1, 20), rng.choice([1, 2000, (1 << 63) - 1])
        runs, count, total, used, state = native.queue_runs(
            bytes(raw), 0, 0, max_msgs, max_bytes, log_end
        )
        assert count <= max_msgs and used <= len(raw) // 20 and state in (0, 1, 2)
        assert sum(stop - start for start, stop in runs) == total
        assert all(0 <= start < stop <= log_end or start < 0 for start, stop in runs)
        if state == 2:
            phys, size = CQ_HEAD.unpack_from(raw, used * 20)
            assert size <= 0 or phys + size > log_end
