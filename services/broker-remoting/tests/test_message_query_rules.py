"""QUERY_MESSAGE's checks: what a query may ask, and which stored records answer it."""

from __future__ import annotations

import pytest

from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import QueryMessageRequest
from ferry.protocol.messages.index import check_query
from ferry.remoting.message_query import carries_key


def stored(topic: str, keys: str | None, uniq: str | None) -> bytes:
    props = {}
    if keys is not None:
        props[record.PROPERTY_KEYS] = keys
    if uniq is not None:
        props[record.PROPERTY_UNIQ_KEY] = uniq
    return record.encode_record(topic.encode(), b"b", record.encode_properties(props))


def test_only_records_really_carrying_the_key_answer_a_query() -> None:
    by_key = QueryMessageRequest(topic="T", key="k1")
    by_id = QueryMessageRequest(topic="T", key="ID", unique=True)
    assert carries_key(stored("T", "k0 k1", "ID"), by_key)
    assert not carries_key(stored("T", "k10", None), by_key)  # a prefix is not the key
    assert not carries_key(stored("Other", "k1", None), by_key)
    assert carries_key(stored("T", None, "ID"), by_id)
    assert not carries_key(stored("T", "ID", None), by_id)
    assert not carries_key(b"not a record", by_key)


@pytest.mark.parametrize(
    "bad",
    [
        QueryMessageRequest(topic="T", key=""),
        QueryMessageRequest(topic="T", key="k", max_num=0),
        QueryMessageRequest(topic="T", key="k", max_num=1001),
        QueryMessageRequest(topic="T", key="k", begin_ms=2, end_ms=1),
        QueryMessageRequest(topic="no spaces allowed", key="k"),
    ],
)
def test_queries_out_of_bounds_are_invalid(bad: QueryMessageRequest) -> None:
    with pytest.raises(InvalidParameterError):
        check_query(bad)
