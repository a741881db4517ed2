"""SQL92 filters in the store's read path: matching records come back, the others move the
next offset on, as tag filtering does."""

from __future__ import annotations

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import SubscriptionParseError
from ferry.store.property_filter import named_values
from ferry.store.store import SQL_FILTER_SCAN, GetResult, MessageStore


def put(store: MessageStore, topic: str, props: list[dict[str, str]]) -> None:
    payload = b"".join(
        record.encode_record(
            topic.encode(),
            f"m{i}".encode(),
            record.encode_properties({record.PROPERTY_UNIQ_KEY: f"K{i}", **p}),
            born_timestamp=1_700_000_000_000,
            born_host=record.pack_host("10.0.0.7:5555"),
        )
        for i, p in enumerate(props)
    )
    store.put(topic, 0, len(props), payload)


def bodies(got: GetResult) -> list[bytes]:
    return [r.body for r in record.iter_records(bytes(got.payload))]


def test_sql_filter_keeps_matching_records_and_moves_past_the_rest(store: MessageStore) -> None:
    put(
        store,
        "Sql",
        [{"a": "1"}, {"a": "7"}, {}, {"a": "9", "TAGS": "B"}, {"a": "x"}, {"a": "6"}],
    )
    got = store.get("Sql", 0, 0, sql="a > 5")
    assert got.status == PullStatus.FOUND
    assert bodies(got) == [b"m1", b"m3", b"m5"]
    assert got.next_begin_offset == 6

    # NULL: the record without `a` (m2) and the one whose `a` is no number (m4) match neither
    negated = store.get("Sql", 0, 0, sql="NOT (a > 5)")
    assert bodies(negated) == [b"m0"]
    # TAGS is a property like the others
    assert bodies(store.get("Sql", 0, 0, sql="TAGS = 'B'")) == [b"m3"]
    # max_msgs counts matches, not entries looked at
    first = store.get("Sql", 0, 0, max_msgs=1, sql="a > 5")
    assert (bodies(first), first.next_begin_offset) == ([b"m1"], 2)

    none = store.get("Sql", 0, 0, sql="a > 100")
    assert none.status == PullStatus.NO_MATCHED_MSG
    assert none.next_begin_offset == 6
    assert store.get("Sql", 0, 6, sql="a > 100").status == PullStatus.NO_NEW_MSG


def test_a_sparse_sql_filter_answers_after_a_bounded_scan(store: MessageStore) -> None:
    n = SQL_FILTER_SCAN + 10
    for start in range(0, n, 500):
        put(store, "Sparse", [{"n": str(i)} for i in range(start, min(n, start + 500))])
    first = store.get("Sparse", 0, 0, sql="n = -1")
    assert first.status == PullStatus.NO_MATCHED_MSG
    assert first.next_begin_offset == SQL_FILTER_SCAN
    rest = store.get("Sparse", 0, first.next_begin_offset, sql=f"n >= {n - 2}")
    assert rest.count == 2
    assert rest.next_begin_offset == n


def test_a_bad_sql_filter_is_a_typed_error(store: MessageStore) -> None:
    put(store, "Bad", [{"a": "1"}])
    with pytest.raises(SubscriptionParseError, match="line 1, column 5"):
        store.get("Bad", 0, 0, sql="a > > 1")


def test_only_the_named_properties_are_read_and_only_where_a_key_starts() -> None:
    raw = record.encode_properties({"xa": "1", "a": "2", "b": "x\u00e9", "UNIQ_KEY": "K"})
    keys = [(n, n.encode() + b"\x01") for n in ("a", "b", "c", "xa")]
    assert named_values(raw, keys) == {"a": "2", "b": "x\u00e9", "xa": "1"}
    assert named_values(record.encode_properties({"ba": "1"}), [("a", b"a\x01")]) == {}
