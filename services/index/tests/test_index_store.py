"""IndexStore and IndexFile, driven directly with CommitLog bytes as the store writes them."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from ferry.index.index_file import HEADER_AT, Hit, IndexFile
from ferry.index.index_store import Geometry, IndexStore
from ferry.index.keys import key_hash
from ferry.protocol import record
from ferry.runtime.offset_names import file_name

T0 = 1_700_000_000_000
SMALL = Geometry(slot_count=64, max_entries=10)
ROLLBACK = record.SYSFLAG_TX_PREPARED | record.SYSFLAG_TX_COMMIT


class Log:
    """A CommitLog as the store writes it: records stamped with their offset and store time."""

    def __init__(self) -> None:
        self.buf = bytearray()

    @property
    def end(self) -> int:
        return len(self.buf)

    def add(
        self,
        topic: str,
        *,
        keys: Sequence[str] = (),
        uniq: str | None = None,
        store_ms: int = T0,
        sysflag: int = 0,
    ) -> int:
        props: dict[str, str] = {}
        if keys:
            props[record.PROPERTY_KEYS] = " ".join(keys)
        if uniq is not None:
            props[record.PROPERTY_UNIQ_KEY] = uniq
        raw = bytearray(
            record.encode_record(
                topic.encode(), b"body", record.encode_properties(props), sysflag=sysflag
            )
        )
        phys = len(self.buf)
        record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, 0, phys)
        record.STORE_STAMP.pack_into(raw, record.OFF_STORE_STAMP, store_ms, bytes(8))
        self.buf += raw
        return phys

    def chunk(self, start: int = 0, stop: int | None = None) -> bytes:
        return bytes(self.buf[start : self.end if stop is None else stop])


def find(
    index: IndexStore,
    topic: str,
    key: str,
    *,
    unique: bool = False,
    begin: int = 0,
    end: int = 1 << 62,
    limit: int = 1000,
) -> list[int]:
    return [
        h.phys_offset for h in index.query(key_hash(topic, key, unique=unique), begin, end, limit)
    ]


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"


def test_key_hashes_are_stable_across_processes_and_versions() -> None:
    # files on disk depend on it: a change here must come with a new index file version
    assert key_hash("T", "k") == key_hash("T", "k")
    assert key_hash("Orders", "order-1") == 0xFC08F3727734F02C
    assert key_hash("Orders", "order-1", unique=True) != key_hash("Orders", "order-1")


def test_a_key_shared_by_many_messages_is_found_newest_first_up_to_the_limit(
    index_dir: Path,
) -> None:
    log = Log()
    shared = [log.add("T", keys=["shared", f"own-{i}"], store_ms=T0 + i) for i in range(25)]
    log.add("Other", keys=["shared"])  # same key, another topic
    index = IndexStore.open(index_dir, Geometry(1024, 1000))
    assert index.apply(log.chunk(), log.end) == 25 * 2 + 1
    assert find(index, "T", "shared") == shared[::-1]
    assert find(index, "T", "shared", limit=5) == shared[::-1][:5]
    assert find(index, "T", "own-7") == [shared[7]]
    assert find(index, "T", "missing") == []
    index.close()


def test_time_range_bounds_are_inclusive(index_dir: Path) -> None:
    log = Log()
    at = {ms: log.add("T", keys=["k"], store_ms=ms) for ms in range(T0, T0 + 10)}
    index = IndexStore.open(index_dir, Geometry(16, 100))
    index.apply(log.chunk(), log.end)
    assert find(index, "T", "k", begin=T0 + 3, end=T0 + 5) == [at[T0 + 5], at[T0 + 4], at[T0 + 3]]
    assert find(index, "T", "k", begin=T0 + 9, end=T0 + 9) == [at[T0 + 9]]
    assert find(index, "T", "k", begin=T0 + 10, end=T0 + 20) == []
    assert find(index, "T", "k", begin=0, end=T0 - 1) == []
    index.close()


def test_unique_ids_and_business_keys_live_in_separate_spaces(index_dir: Path) -> None:
    log = Log()
    by_key = log.add("T", keys=["ID1"])
    by_uniq = log.add("T", uniq="ID1")
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    assert find(index, "T", "ID1") == [by_key]
    assert find(index, "T", "ID1", unique=True) == [by_uniq]
    index.close()


def test_rolled_back_transaction_records_are_not_indexed(index_dir: Path) -> None:
    log = Log()
    log.add("T", keys=["tx"], sysflag=ROLLBACK)
    committed = log.add("T", keys=["tx"], sysflag=record.SYSFLAG_TX_COMMIT)
    prepared = log.add("T", keys=["tx"], sysflag=record.SYSFLAG_TX_PREPARED)
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    assert find(index, "T", "tx") == [prepared, committed]
    index.close()


def test_files_roll_by_entry_count_and_a_query_spans_them(index_dir: Path) -> None:
    log = Log()
    offsets = [log.add("T", keys=["k", f"k{i}"], uniq=f"U{i}") for i in range(20)]
    index = IndexStore.open(index_dir, SMALL)  # 10 entries a file: 3 records of 3 keys each
    index.apply(log.chunk(), log.end)
    names = sorted(p.name for p in index_dir.iterdir() if p.name.isdigit())
    assert len(names) == 7
    assert names[1] == file_name(offsets[3])  # named by the offset of their first record
    assert find(index, "T", "k") == offsets[::-1]
    assert find(index, "T", "U13", unique=True) == [offsets[13]]
    assert index.stats().entries == 60
    index.close()


def test_records_below_applied_are_never_indexed_twice(index_dir: Path) -> None:
    log = Log()
    first = [log.add("T", keys=["k"]) for _ in range(3)]
    middle = log.end
    second = [log.add("T", keys=["k"]) for _ in range(3)]
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(0, middle), middle)
    index.apply(log.chunk(0, middle), middle)  # the same notice again
    index.apply(log.chunk(), log.end)  # a read overlapping what was applied
    index.apply(log.chunk(first[2], log.end), log.end)
    assert find(index, "T", "k") == (first + second)[::-1]
    assert index.applied == log.end
    index.close()


def test_a_reopened_index_resumes_at_its_committed_offset(index_dir: Path) -> None:
    log = Log()
    offsets = [log.add("T", keys=["k"], uniq=f"U{i}") for i in range(8)]
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    index.close()
    again = IndexStore.open(index_dir, SMALL)
    assert again.applied == log.end
    assert find(again, "T", "k") == offsets[::-1]
    later = log.add("T", keys=["k"])
    again.apply(log.chunk(offsets[5]), log.end)
    assert find(again, "T", "k") == [later, *offsets[::-1]]
    again.close()


def test_entries_written_after_the_last_commit_are_undone_on_open(index_dir: Path) -> None:
    log = Log()
    committed = [log.add("T", keys=["a", "b"]) for _ in range(2)]
    index = IndexStore.open(index_dir, Geometry(4, 50))
    index.apply(log.chunk(), log.end)
    newest = index.files[-1]
    # a process killed in the middle of a batch: entries and slots written, no commit
    for i in range(5):
        newest.put(key_hash("T", "a"), 10_000 + i, T0)
        newest.put(key_hash("T", f"new{i}"), 10_000 + i, T0)
    assert find(index, "T", "a")[:1] == [10_004]
    index.close(sync=False)

    reopened = IndexStore.open(index_dir, Geometry(4, 50))
    assert reopened.applied == log.end
    assert reopened.files[-1].count == 4
    assert find(reopened, "T", "a") == committed[::-1]
    assert find(reopened, "T", "b") == committed[::-1]
    assert find(reopened, "T", "new0") == []
    # what comes next is indexed once, in place of the undone entries
    more = log.add("T", keys=["a"])
    reopened.apply(log.chunk(more), log.end)
    assert find(reopened, "T", "a") == [more, *committed[::-1]]
    reopened.close()


def test_a_torn_header_write_falls_back_to_the_previous_commit(index_dir: Path) -> None:
    log = Log()
    first = log.add("T", keys=["k"])
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    middle = log.end
    log.add("T", keys=["k"])
    index.apply(log.chunk(middle), log.end)
    newest = index.files[-1]
    torn_at = HEADER_AT[newest.header.seq % 2]
    path = newest.path
    index.close()
    with path.open("r+b") as f:  # a crash in the middle of the last header write
        f.seek(torn_at + 8)
        f.write(b"\xff\xff")
    again = IndexStore.open(index_dir, SMALL)
    assert again.applied == middle
    assert find(again, "T", "k") == [first]
    again.close()


def test_after_a_machine_crash_the_newest_file_is_indexed_again(index_dir: Path) -> None:
    log = Log()
    for i in range(9):
        log.add("T", keys=["k"], uniq=f"U{i}")
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    files = [f.path.name for f in index.files]
    sealed_upto = index.files[-2].applied
    index.close()
    again = IndexStore.open(index_dir, SMALL, drop_newest=True)
    assert [f.path.name for f in again.files] == files[:-1]
    assert again.applied == sealed_upto
    again.apply(log.chunk(sealed_upto), log.end)
    assert len(find(again, "T", "k")) == 9
    again.close()


def test_files_wholly_below_the_commitlog_start_are_deleted(index_dir: Path) -> None:
    log = Log()
    offsets = [log.add("T", keys=["k"]) for _ in range(30)]  # 10 records a file
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    assert len(index.files) == 3
    assert index.delete_below(offsets[15]) == 1  # the second file still has 15..19
    assert [f.begin_phys for f in index.files] == [offsets[10], offsets[20]]
    assert find(index, "T", "k") == offsets[15:][::-1]  # entries below the start are not given
    assert index.delete_below(log.end) == 1
    assert len(index.files) == 1  # the newest stays: it carries the applied offset
    index.close()
    assert IndexStore.open(index_dir, SMALL).applied == log.end


def test_a_rebuild_in_one_pass_gives_the_same_files_as_incremental_indexing(
    tmp_path: Path,
) -> None:
    log = Log()
    cuts = [0]
    for i in range(200):
        log.add("T", keys=[f"k{i % 7}", f"order-{i}"], uniq=f"U{i:04d}", store_ms=T0 + i)
        if i % 13 == 0:
            cuts.append(log.end)
    cuts.append(log.end)
    geometry = Geometry(32, 50)
    live = IndexStore.open(tmp_path / "live", geometry)
    for a, b in itertools.pairwise(cuts):
        live.apply(log.chunk(a, b), b)
    rebuilt = IndexStore.open(tmp_path / "rebuilt", geometry)
    rebuilt.apply(log.chunk(), log.end)
    assert [f.path.name for f in rebuilt.files] == [f.path.name for f in live.files]
    assert [f.entries_region() for f in rebuilt.files] == [f.entries_region() for f in live.files]
    assert rebuilt.applied == live.applied
    live.close()
    rebuilt.close()


def test_a_corrupt_file_is_moved_aside_and_the_others_still_answer(index_dir: Path) -> None:
    log = Log()
    offsets = [log.add("T", keys=["k"]) for _ in range(25)]
    index = IndexStore.open(index_dir, SMALL)
    index.apply(log.chunk(), log.end)
    bad = index.files[0].path
    index.close()
    bad.write_bytes(b"not an index file")
    again = IndexStore.open(index_dir, SMALL)
    assert (index_dir / (bad.name + ".corrupt")).exists()
    assert find(again, "T", "k") == offsets[10:][::-1]
    assert again.applied == log.end
    again.close()


def test_an_index_file_refuses_a_put_past_its_capacity(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "00000000000000000000", 4, 2)
    f.put(1, 0, T0)
    f.put(2, 10, T0)
    with pytest.raises(Exception, match="full"):
        f.put(3, 20, T0)
    f.close()


def test_a_record_with_more_keys_than_a_file_holds_keeps_its_first_keys(index_dir: Path) -> None:
    log = Log()
    big = log.add("T", keys=[f"k{i}" for i in range(5)], uniq="U")
    after = log.add("T", keys=["k0"])
    index = IndexStore.open(index_dir, Geometry(16, 3))
    assert index.apply(log.chunk(), log.end) == 3 + 1
    assert find(index, "T", "k2") == [big]
    assert find(index, "T", "k3") == []
    assert find(index, "T", "k0") == [after, big]
    assert len(index.files) == 2
    index.close()


def test_records_that_do_not_decode_are_refused_whole_when_strict(index_dir: Path) -> None:
    log = Log()
    good = log.add("T", keys=["k"])
    torn = log.chunk() + b"\x00\x00\x00\x7f\xda\xa3\x20\xa7 not a record"
    index = IndexStore.open(index_dir, SMALL)
    with pytest.raises(record.RecordError):
        index.apply(torn, len(torn), strict=True)  # a notice: read the log instead
    assert (index.applied, find(index, "T", "k")) == (0, [])
    index.apply(torn, len(torn))  # the log itself: index what decodes, pass the rest over
    assert (index.applied, find(index, "T", "k")) == (len(torn), [good])
    index.close()


def test_slot_writes_through_the_typed_view_match_the_struct_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        (100 + i, T0 + i, [key_hash("T", f"k{i % 7}"), key_hash("T", f"u{i}")]) for i in range(50)
    ]
    view = IndexFile.create(tmp_path / file_name(0), 16, 200)
    monkeypatch.setattr(sys, "byteorder", "big")  # the path of big-endian machines
    packed = IndexFile.create(tmp_path / file_name(1), 16, 200)
    monkeypatch.undo()
    for f in (view, packed):
        f.put_records(records[:20])
        f.put_records(records[20:])
    assert view.entries_region() == packed.entries_region()
    hits: list[Hit] = []
    packed.lookup(key_hash("T", "k3"), 0, 1 << 62, 100, hits)
    assert [h.phys_offset for h in hits] == [100 + i for i in reversed(range(50)) if i % 7 == 3]
    view.close()
    packed.close()
