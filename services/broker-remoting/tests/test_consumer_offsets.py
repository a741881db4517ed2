import json
from pathlib import Path

from ferry.remoting.consumer_offsets import ConsumerOffsetTable


def reloaded(config_dir: Path) -> ConsumerOffsetTable:
    table = ConsumerOffsetTable(config_dir)
    table.load()
    return table


def test_commit_then_get_per_group_topic_and_queue() -> None:
    table = ConsumerOffsetTable(Path("/nonexistent"))
    table.commit("g1", "Orders", 0, 10)
    table.commit("g1", "Orders", 1, 3)
    table.commit("g2", "Orders", 0, 7)

    assert table.get("g1", "Orders", 0) == 10
    assert table.get("g1", "Orders", 1) == 3
    assert table.get("g2", "Orders", 0) == 7
    assert table.get("g2", "Orders", 1) is None
    assert table.get("g1", "Other", 0) is None
    assert table.queues("g1", "Orders") == {0: 10, 1: 3}
    assert table.groups() == {"g1", "g2"}


def test_offsets_survive_persist_and_reload(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    table.commit("g1", "Orders", 0, 10)
    table.commit("g1", "%RETRY%g1", 0, 2)
    table.persist()

    again = reloaded(tmp_path)
    assert again.get("g1", "Orders", 0) == 10
    assert again.get("g1", "%RETRY%g1", 0) == 2
    doc = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert doc == {"offsetTable": {"%RETRY%g1@g1": {"0": 2}, "Orders@g1": {"0": 10}}}


def test_persist_if_dirty_writes_only_after_a_change(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    assert table.persist_if_dirty() is False
    assert not (tmp_path / "consumerOffset.json").exists()

    table.commit("g1", "Orders", 0, 1)
    assert table.persist_if_dirty() is True
    assert table.persist_if_dirty() is False

    table.commit("g1", "Orders", 0, 1)  # same value: nothing to write
    assert table.persist_if_dirty() is False
    table.commit("g1", "Orders", 0, 2)
    assert table.persist_if_dirty() is True
    assert reloaded(tmp_path).get("g1", "Orders", 0) == 2


def test_offsets_may_move_backwards_for_a_reset(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path)
    table.commit("g1", "Orders", 0, 50)
    table.commit("g1", "Orders", 0, 0)
    assert table.get("g1", "Orders", 0) == 0
