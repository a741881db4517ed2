"""The C batch scan and stamp give what the Python references give, byte for byte, and leave
every bad record to the Python scan (which names it)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from ferry import native
from ferry.protocol import record
from ferry.protocol.errors import MessageIllegalError
from ferry.store import batch as batch_mod
from ferry.store import commit_log as commit_log_mod
from ferry.store import pull_runs
from ferry.store.batch import scan_batch_py
from ferry.store.commit_log import CommitLog
from ferry.store.store import MessageStore

pytestmark = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")
MAX_BODY = 4 * 1024 * 1024
MAX_RECORD = 1 << 30
MakeBatch = Callable[..., bytes]


def records(topic: bytes, n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    tags = ["", "TagA", "näive", "x" * 300, "a b", "TAGS"]
    out = []
    for i in range(n):
        props: dict[str, str] = {"UNIQ_KEY": f"U{i:06d}"}
        tag = rng.choice(tags)
        if tag:
            props["TAGS"] = tag
        if rng.random() < 0.3:
            props = {"XTAGS": "decoy", **props}  # a key that ends in TAGS is not TAGS
        body = rng.randbytes(rng.randint(0, 2000))
        out.append(
            record.encode_record(
                topic,
                body,
                record.encode_properties(props),
                flag=rng.randint(-5, 5),
                sysflag=rng.choice([0, 1, 4, 8, 12]),
                born_timestamp=rng.randint(0, 1 << 50),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(5))
def test_scan_matches_the_python_scan(seed: int) -> None:
    recs = records(b"Orders", 64, seed)
    buf = b"".join(recs)
    got = native.scan_batch(buf, len(recs), b"Orders", MAX_BODY, MAX_RECORD, record.tags_code)
    assert got is not None
    assert batch_mod.Batch(*got) == scan_batch_py(buf, len(recs), b"Orders", MAX_BODY, MAX_RECORD)
    assert got[2].count(0) < len(recs)  # some records carry tags: their codes were compared


def bad_payloads() -> dict[str, tuple[bytes, int, bytes, int]]:
    good = records(b"Orders", 3, 99)
    buf = b"".join(good)
    flipped_magic = bytearray(buf)
    flipped_magic[4] ^= 0xFF
    long_size = bytearray(buf)
    long_size[0:4] = (len(good[0]) + 5).to_bytes(4, "big")
    negative_body = bytearray(buf)
    negative_body[84:88] = (-1).to_bytes(4, "big", signed=True)
    return {
        "count too high": (buf, 4, b"Orders", MAX_BODY),
        "count too low": (buf, 2, b"Orders", MAX_BODY),
        "other topic": (buf, 3, b"Order", MAX_BODY),
        "bad magic": (bytes(flipped_magic), 3, b"Orders", MAX_BODY),
        "size past the end": (bytes(long_size), 3, b"Orders", MAX_BODY),
        "negative body": (bytes(negative_body), 3, b"Orders", MAX_BODY),
        "truncated": (buf[:-1], 3, b"Orders", MAX_BODY),
        "body too big": (buf, 3, b"Orders", 10),
        "garbage": (random.Random(1).randbytes(500), 2, b"Orders", MAX_BODY),
        "empty": (b"", 1, b"Orders", MAX_BODY),
    }


@pytest.mark.parametrize("case", list(bad_payloads()))
def test_bad_records_are_left_to_the_python_scan(case: str) -> None:
    buf, count, topic, max_body = bad_payloads()[case]
    assert native.scan_batch(buf, count, topic, max_body, MAX_RECORD, record.tags_code) is None
    with pytest.raises(MessageIllegalError):
        batch_mod.scan_batch(buf, count, topic, max_body, MAX_RECORD)


def append_all(root: Path, use_native: bool, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(native, "ENABLED", use_native)
    log = CommitLog(root, 64 * 1024)
    log.load()
    try:
        for seed in range(6):  # batches that cross segment ends: blank tails, several chunks
            recs = records(b"Orders", 20, seed)
            buf = b"".join(recs)
            scanned = batch_mod.scan_batch(buf, len(recs), b"Orders", MAX_BODY, MAX_RECORD)
            appended = log.append(
                buf, scanned.sizes, scanned.flags, scanned.tags, 7, seed * 20, 1_700_000_000_000,
                record.pack_host("10.0.0.1:10911"),
            )  # fmt: skip
            cq = [
                commit_log_mod.CQ_ENTRY.unpack_from(appended.cq_entries, 20 * i) for i in range(20)
            ]
            assert [e[0] for e in cq] == appended.phys_offsets
            assert [e[1] for e in cq] == scanned.sizes
        return bytes(log.slice(log.min_offset, log.end))
    finally:
        log.close()


def test_append_with_the_c_stamp_writes_the_same_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_c = append_all(tmp_path / "c", True, monkeypatch)
    by_python = append_all(tmp_path / "py", False, monkeypatch)
    assert by_c == by_python
    recs = list(record.iter_records(by_c))
    assert recs and all(r.store_host == "10.0.0.1:10911" for r in recs)
    for r in recs:  # the CRCs the C code wrote verify (the log starts at offset 0)
        assert record.verify_crc(by_c, r.phys_offset, r.total_size)
    assert len({r.phys_offset // (64 * 1024) for r in recs}) > 2  # several segments


def test_pull_ranges_match_the_python_walk(store: MessageStore, batch: MakeBatch) -> None:
    """A GET's log ranges from the C walk over ConsumeQueue entries equal the Python walk's,
    for queues whose batches interleave, entries spanning ConsumeQueue files (50 a file
    here), byte limits landing anywhere, and a log end cut short (an entry outside the log)."""
    rng = random.Random(7)
    for _ in range(60):  # batches of 1-9 records, to queues 0-2, so runs break and join
        n = rng.randint(1, 9)
        bodies = [rng.randbytes(rng.randint(0, 600)) for _ in range(n)]
        store.put("Orders", rng.randint(0, 2), n, batch("Orders", bodies))
    compared = 0
    for queue_id in range(3):
        cq = store.queues.get("Orders", queue_id)
        assert cq is not None and cq.max_offset > 60  # spans files
        for _ in range(80):
            offset = rng.randint(0, cq.max_offset - 1)
            max_msgs = rng.choice([1, 2, 7, 32, 256])
            max_bytes = rng.choice([1, 500, 3000, 1 << 22])
            log_end = rng.choice([store.log.end, store.log.end, rng.randint(0, store.log.end)])
            got = pull_runs.collect(cq, offset, max_msgs, max_bytes, log_end)
            want = pull_runs.collect_py(cq, offset, max_msgs, max_msgs, max_bytes, None, log_end)
            assert got == want, (queue_id, offset, max_msgs, max_bytes, log_end)
            compared += got[1]
    assert compared > 1000


def test_a_pull_reads_the_same_records_with_or_without_c(
    store: MessageStore, batch: MakeBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(20):
        store.put("Orders", i % 2, 5, batch("Orders", [b"m%d-%d" % (i, j) for j in range(5)]))
    with_c = [store.get("Orders", q, o, 17, 1 << 20) for q in (0, 1) for o in (0, 3, 49)]
    monkeypatch.setattr(native, "ENABLED", False)
    without = [store.get("Orders", q, o, 17, 1 << 20) for q in (0, 1) for o in (0, 3, 49)]
    assert [(r.status, r.next_begin_offset, r.count, bytes(r.payload)) for r in with_c] == [
        (r.status, r.next_begin_offset, r.count, bytes(r.payload)) for r in without
    ]
    assert with_c[0].count == 17 and with_c[2].count == 1  # offset 49 is the queue's last
