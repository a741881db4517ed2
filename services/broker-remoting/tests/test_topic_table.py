import json
from pathlib import Path

import pytest

from ferry.protocol.codes import Perm
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import AUTO_CREATE_TOPIC_KEY
from ferry.remoting.state_file import StateFileError
from ferry.remoting.topic_table import TopicTable, check_topic_config


def reloaded(config_dir: Path) -> TopicTable:
    table = TopicTable(config_dir)
    table.load()
    return table


def test_topic_put_is_on_disk_before_put_returns(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    table.put(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=2, perm=Perm.READ))

    again = reloaded(tmp_path)
    assert again.get("Orders") == TopicConfig(
        "Orders", read_queue_nums=4, write_queue_nums=2, perm=Perm.READ
    )
    assert again.data_version.counter == 1


def test_topic_file_keeps_rocketmq_outer_shape(tmp_path: Path) -> None:
    TopicTable(tmp_path).put(TopicConfig("Orders"))

    doc = json.loads((tmp_path / "topics.json").read_text())
    assert set(doc) == {"topicConfigTable", "dataVersion"}
    assert doc["topicConfigTable"]["Orders"]["topic_name"] == "Orders"


def test_unchanged_put_does_not_rewrite_the_file(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    assert table.put(TopicConfig("Orders")) is True
    before = (tmp_path / "topics.json").stat().st_mtime_ns
    assert table.put(TopicConfig("Orders")) is False
    assert (tmp_path / "topics.json").stat().st_mtime_ns == before
    assert table.data_version.counter == 1


def test_topic_file_is_replaced_atomically_leaving_no_temporary(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    for i in range(5):
        table.put(TopicConfig(f"T{i}"))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.json"]
    assert [t.topic_name for t in reloaded(tmp_path).all()] == [f"T{i}" for i in range(5)]


def test_torn_temporary_from_a_crashed_write_is_ignored_on_load(tmp_path: Path) -> None:
    TopicTable(tmp_path).put(TopicConfig("Kept"))
    (tmp_path / "topics.json.tmp").write_bytes(b'{"topicConfigTable": {"Half')

    table = reloaded(tmp_path)
    assert [t.topic_name for t in table.all()] == ["Kept"]
    table.put(TopicConfig("Next"))  # the next write replaces the leftover
    assert [t.topic_name for t in reloaded(tmp_path).all()] == ["Kept", "Next"]


def test_corrupt_topic_file_stops_the_broker_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text("{not json")
    with pytest.raises(StateFileError, match=r"topics\.json"):
        reloaded(tmp_path)


def test_default_topic_follows_auto_create_setting(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    table.set_default_topic(True, 8, Perm.READ_WRITE)
    default = reloaded(tmp_path).get(AUTO_CREATE_TOPIC_KEY)
    assert default is not None
    assert (default.read_queue_nums, default.write_queue_nums) == (8, 8)
    assert default.perm == Perm.INHERIT | Perm.READ_WRITE

    table.set_default_topic(False, 8, Perm.READ_WRITE)
    assert reloaded(tmp_path).get(AUTO_CREATE_TOPIC_KEY) is None


def test_remove_persists(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    table.put(TopicConfig("Gone"))
    assert table.remove("Gone") is True
    assert table.remove("Gone") is False
    assert reloaded(tmp_path).get("Gone") is None


@pytest.mark.parametrize(
    "config",
    [
        TopicConfig("bad name"),
        TopicConfig("T", read_queue_nums=0),
        TopicConfig("T", write_queue_nums=1025),
        TopicConfig("T", perm=7),
        TopicConfig("T", perm=1),
    ],
)
def test_admin_topic_config_is_checked(config: TopicConfig) -> None:
    with pytest.raises(InvalidParameterError):
        check_topic_config(config)


def test_admin_topic_config_accepts_limits() -> None:
    check_topic_config(TopicConfig("T", read_queue_nums=1, write_queue_nums=1024, perm=2))
