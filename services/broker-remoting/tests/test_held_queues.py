"""A newly elected master's topic table made to cover what its store holds (held_queues.py)."""

from pathlib import Path

from ferry.protocol.codes import Perm
from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import SCHEDULE_TOPIC, retry_topic
from ferry.remoting.held_queues import cover_held_queues
from ferry.remoting.topic_table import TopicTable


def test_a_stale_table_is_widened_and_completed_and_that_is_on_disk(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    table.put(TopicConfig("Widened", read_queue_nums=2, write_queue_nums=2, perm=Perm.READ))
    table.put(TopicConfig("Covered", read_queue_nums=8, write_queue_nums=8))
    held = {"Widened": 4, "Covered": 3, "Fresh": 2, retry_topic("g"): 1, SCHEDULE_TOPIC: 18}

    changed = cover_held_queues(table, held)

    widened = TopicConfig("Widened", read_queue_nums=4, write_queue_nums=2, perm=Perm.READ)
    fresh = TopicConfig("Fresh", read_queue_nums=2, write_queue_nums=2)
    retry = TopicConfig(retry_topic("g"), read_queue_nums=1, write_queue_nums=1)
    assert sorted(changed, key=lambda c: c.topic_name) == sorted(
        [widened, fresh, retry], key=lambda c: c.topic_name
    )
    again = TopicTable(tmp_path)
    again.load()
    assert again.get("Widened") == widened  # reads widened; writes and perm as configured
    assert again.get("Fresh") == fresh  # a topic the table lacked
    assert again.get("Covered") == TopicConfig("Covered", 8, 8)  # never narrowed
    assert again.get(SCHEDULE_TOPIC) is None  # the scheduler reads its queues itself


def test_a_table_that_covers_the_store_is_left_as_it_is(tmp_path: Path) -> None:
    table = TopicTable(tmp_path)
    table.put(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4))
    version = table.data_version.counter

    assert cover_held_queues(table, {"Orders": 4}) == []
    assert table.data_version.counter == version
