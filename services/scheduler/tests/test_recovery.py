"""The start-up scan: delivered copies are told from the records still waiting."""

from __future__ import annotations

from ferry.protocol import record
from ferry.scheduler.recovery import delivered_origins


def rec(topic: str, **props: str) -> bytes:
    return record.encode_record(topic.encode(), b"b", record.encode_properties(props))


def test_only_delivered_copies_count() -> None:
    chunk = b"".join(
        [
            rec("Orders", SCHEDULED_FROM="100"),
            rec("SCHEDULE_TOPIC_XXXX", SCHEDULED_FROM="200"),  # still waiting: not a delivery
            rec("Orders", KEYS="k"),
            rec("%RETRY%g", SCHEDULED_FROM="300"),
        ]
    )
    assert delivered_origins(chunk, frozenset({"SCHEDULE_TOPIC_XXXX"})) == {100, 300}
    assert delivered_origins(rec("Orders"), frozenset()) == set()
