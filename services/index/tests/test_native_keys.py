"""The C key scan and entry writer give what the Python references give, and the scan leaves
to Python what it must decide (malformed records, non-ASCII keys)."""

from __future__ import annotations

import gc
import random
import sys
from pathlib import Path

import pytest

from ferry import native
from ferry.index import keys
from ferry.index.index_file import IndexFile
from ferry.protocol import record

pytestmark = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")


def stored(topic: str, props: dict[str, str], *, sysflag: int = 0, phys: int = 0) -> bytes:
    raw = bytearray(
        record.encode_record(
            topic.encode(), b"body", record.encode_properties(props), sysflag=sysflag
        )
    )
    raw[28:36] = phys.to_bytes(8, "big")  # as the store stamps it
    raw[56:64] = (1_700_000_000_000 + phys).to_bytes(8, "big")
    return bytes(raw)


def log_of(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    key_sets = ["", "k1", "k1 k2", "k1  k1\tk2", " lead trail ", "a\x1cb", "dup dup dup"]
    out = bytearray()
    for _ in range(n):
        props = {}
        if rng.random() < 0.9:
            props["UNIQ_KEY"] = f"{rng.getrandbits(64):016X}"
        chosen = rng.choice(key_sets)
        if chosen:
            props["KEYS"] = chosen
        if rng.random() < 0.2:
            props = {"XKEYS": "decoy", "NOT_UNIQ_KEY": "decoy", **props}
        topic = rng.choice(["T", "Orders", "t" * 200])
        out += stored(topic, props, sysflag=rng.choice([0, 0, 4, 8, 12]), phys=len(out))
        if rng.random() < 0.05:
            out += record.PREFIX.pack(40, record.BLANK_MAGIC) + bytes(32)  # a segment tail
    return bytes(out)


@pytest.mark.parametrize("seed", range(6))
def test_c_key_scan_matches_python(seed: int) -> None:
    data = log_of(200, seed)
    got = native.indexed_records(data)
    assert got is not None
    assert got == keys.indexed_records_py(data)
    assert any(len(h) > 1 for _, _, h in got)  # business keys and unique keys both hashed


def test_c_scanned_records_stay_out_of_the_collector_and_go_by_refcount() -> None:
    data = log_of(300, 7)
    got = native.indexed_records(data)
    assert got is not None and len(got) > 100
    # ints in a tuple and a list: the collector's young passes need not walk them (they were
    # ~14 % of the index's CPU under batched produce,
    # docs/perf-notes/2026-11-26-floor-under-a-send.md)
    assert not any(gc.is_tracked(rec) or gc.is_tracked(rec[2]) for rec in got)
    hashes = got[0][2]
    base = sys.getrefcount(hashes)
    got.clear()  # reference counting alone frees them
    assert sys.getrefcount(hashes) == base - 1
    assert gc.is_tracked(keys.indexed_records_py(data)[0])  # the reference leaves them be


def test_key_hashes_are_the_documented_ones() -> None:
    data = stored("Orders", {"KEYS": "a b a", "UNIQ_KEY": "ID1"}, phys=0)
    assert native.indexed_records(data) == [
        (
            0,
            1_700_000_000_000,
            [
                keys.key_hash("Orders", "a"),
                keys.key_hash("Orders", "b"),
                keys.key_hash("Orders", "ID1", unique=True),
            ],
        )
    ]


@pytest.mark.parametrize(
    "data",
    [
        stored("T", {"KEYS": "clé naïve"}),  # non-ASCII keys: decoded as UTF-8 in Python
        stored("T", {"KEYS": " ".join(f"k{i}" for i in range(100))}),  # many keys
        stored("T", {"KEYS": "k"})[:-3],  # truncated
        b"\x00" * 100,  # garbage
    ],
    ids=["non-ascii", "many-keys", "truncated", "garbage"],
)
def test_unusual_records_are_left_to_python(data: bytes) -> None:
    assert native.indexed_records(data) is None
    try:
        expected = keys.indexed_records_py(data)
    except record.RecordError:
        with pytest.raises(record.RecordError):
            keys.indexed_records(data)
    else:
        assert keys.indexed_records(data) == expected


def fill(path: Path, use_native: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, IndexFile]:
    monkeypatch.setattr(native, "ENABLED", use_native)
    index = IndexFile.create(path, 97, 5000)  # few slots: long chains, batch-local links
    rng = random.Random(3)
    for batch in range(20):
        records = [
            (
                batch * 1000 + i,
                1_700_000_000_000 + rng.randint(-50, 50),
                [rng.getrandbits(64) for _ in range(rng.randint(1, 3))],
            )
            for i in range(rng.randint(1, 60))
        ]
        index.put_records(records)
        index.commit(batch * 1000 + 999)
    index.sync()
    return path.read_bytes(), index


def test_c_entries_write_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_c, c_index = fill(tmp_path / "c", True, monkeypatch)
    by_py, py_index = fill(tmp_path / "py", False, monkeypatch)
    try:
        assert by_c == by_py

        def summary(index: IndexFile) -> tuple[int, ...]:
            return (index.count, index.begin_ms, index.end_ms, index.begin_phys, index.end_phys)

        assert summary(c_index) == summary(py_index)
        assert c_index.count > 500
    finally:
        c_index.close()
        py_index.close()
