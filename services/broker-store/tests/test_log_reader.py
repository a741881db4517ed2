"""Reads of a real store's CommitLog files by another process (ferry.runtime.log_reader:
remoting's pulls, the index's dispatch): the same bytes the store would send, and None (the
store sends them) whenever the files cannot be trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

from ferry.protocol import record
from ferry.runtime.config import BrokerConfig
from ferry.runtime.log_reader import LogReader
from ferry.store.store import MessageStore

SEGMENT = 64 * 1024


def config(root: Path) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=20 * 50,
    )


def fill(store: MessageStore, seed: int, batches: int = 40) -> None:
    for i in range(batches):  # two queues interleaved, so a pull spans several runs
        bodies = [bytes([seed]) * (600 + 97 * j) + b"%d" % i for j in range(5)]
        recs = [record.encode_record(b"Orders", body, b"") for body in bodies]
        store.put("Orders", i % 2, len(recs), b"".join(recs))


def pull(
    store: MessageStore, queue_id: int, offset: int, payload: bool = True
) -> tuple[list[tuple[int, int]], bytes]:
    result = store.get("Orders", queue_id, offset, 64, 1 << 20, payload=payload)
    return result.runs or [], bytes(result.payload)


def read(reader: LogReader, runs: list[tuple[int, int]]) -> bytes | None:
    data = reader.read(runs)
    return None if data is None else bytes(data)


def test_reads_what_the_store_would_send_across_segments(tmp_path: Path) -> None:
    store = MessageStore.open(config(tmp_path))
    try:
        fill(store, 1)
        assert store.log.end > 2 * SEGMENT  # the queues' records lie in several files
        reader = LogReader(tmp_path / "commitlog")
        for queue_id in (0, 1):
            for offset in (0, 17, 60):
                runs, _ = pull(store, queue_id, offset, payload=False)
                _, sent = pull(store, queue_id, offset)
                assert len(runs) > 1
                assert read(reader, runs) == sent
        assert reader.reads == 6 and reader.misses == 0 and reader.active
    finally:
        store.close()


def test_files_elsewhere_or_a_range_off_a_record_go_through_the_store(tmp_path: Path) -> None:
    store = MessageStore.open(config(tmp_path / "store"))
    try:
        fill(store, 2, batches=4)
        runs, _ = pull(store, 0, 0, payload=False)
        away = LogReader(tmp_path / "elsewhere")
        assert away.read(runs) is None and away.misses == 1
        assert not away.active  # the next pulls ask the store for the records themselves
        reader = LogReader(tmp_path / "store" / "commitlog")
        start, stop = runs[0]
        assert reader.read([(start + 4, stop)]) is None  # not where a record starts
        assert reader.read([(start, stop + SEGMENT)]) is None  # past what was written
        assert LogReader(tmp_path / "store" / "commitlog", enabled=False).active is False
    finally:
        store.close()


def test_a_store_wiped_and_refilled_is_read_anew_not_from_the_old_files(tmp_path: Path) -> None:
    """Files kept open from a store since deleted and made again under the same names (the
    same offsets, other records) must not serve the old bytes."""
    root = tmp_path / "store"
    store = MessageStore.open(config(root))
    fill(store, 3, batches=4)
    reader = LogReader(root / "commitlog")
    runs, _ = pull(store, 0, 0, payload=False)
    old = pull(store, 0, 0)[1]
    assert read(reader, runs) == old
    store.close()
    shutil.rmtree(root)
    store = MessageStore.open(config(root))
    try:
        fill(store, 4, batches=4)
        runs, _ = pull(store, 0, 0, payload=False)
        fresh = pull(store, 0, 0)[1]
        assert fresh != old
        assert read(reader, runs) == fresh
    finally:
        store.close()
