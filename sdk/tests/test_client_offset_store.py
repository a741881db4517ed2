"""The broadcasting consumer's local offset file."""

from __future__ import annotations

from pathlib import Path

from ferry.client.message import MessageQueue
from ferry.client.offset_store import LocalOffsetStore, offset_file, open_local_store

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-b", 1)


def test_offsets_survive_a_restart(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, "10.0.0.1", "one", "g")
    assert store.read(Q0) is None
    store.update(Q0, 42)
    store.update(Q1, 7)
    store.persist()
    again = open_local_store(tmp_path, "10.0.0.1", "one", "g")
    assert (again.read(Q0), again.read(Q1)) == (42, 7)
    assert store.path == tmp_path / "10.0.0.1@one" / "g" / "offsets.json"
    assert not list(store.path.parent.glob("*.tmp"))  # written through a rename


def test_each_instance_and_group_has_its_own_file(tmp_path: Path) -> None:
    paths = {
        offset_file(tmp_path, key, group)
        for key in ("10.0.0.1@one", "10.0.0.1@two")
        for group in ("g1", "g2")
    }
    assert len(paths) == 4


def test_a_file_that_does_not_parse_is_set_aside_and_the_member_starts_afresh(
    tmp_path: Path,
) -> None:
    path = offset_file(tmp_path, "10.0.0.1@one", "g")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"group": "g", "offsets": [')
    store = LocalOffsetStore(path, "g")
    store.load()
    assert store.read(Q0) is None
    assert path.with_name("offsets.json.bad").exists()
    store.update(Q0, 3)
    store.persist()
    assert open_local_store(tmp_path, "10.0.0.1", "one", "g").read(Q0) == 3


def test_nothing_is_written_when_nothing_changed(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, "10.0.0.1", "one", "g")
    store.persist()
    assert not store.path.exists()
    store.update(Q0, 1)
    store.persist()
    mtime = store.path.stat().st_mtime_ns
    store.update(Q0, 1)
    store.persist()
    assert store.path.stat().st_mtime_ns == mtime
