"""MessageSelector: what subscriptions carry on the wire, and what the SDK checks itself."""

from __future__ import annotations

import pytest

from ferry.client import InvalidParameterError, MessageSelector, SqlFilterError
from ferry.client.consume_state import parse_tags
from ferry.client.message_selector import subscription_data, wire_expression
from ferry.protocol.messages import SubscriptionData


def test_a_string_means_tags_and_a_selector_says_its_type() -> None:
    assert wire_expression("A || B") == ("TAG", "A || B")
    assert wire_expression(MessageSelector.by_tag("A")) == ("TAG", "A")
    assert wire_expression(MessageSelector.by_tag()) == ("TAG", "*")
    assert wire_expression(MessageSelector.by_sql("a > 5")) == ("SQL92", "a > 5")
    assert subscription_data("T", MessageSelector.by_sql("a > 5")) == SubscriptionData(
        "T", "a > 5", "SQL92"
    )


def test_by_sql_refuses_a_bad_filter_at_once_with_its_position() -> None:
    with pytest.raises(SqlFilterError) as caught:
        MessageSelector.by_sql("a > 5 AND\nb IN (1)")
    assert (caught.value.line, caught.value.column) == (2, 7)
    with pytest.raises(InvalidParameterError):
        wire_expression(MessageSelector("CLASS", "x"))


def test_only_tags_are_checked_again_by_the_client() -> None:
    assert parse_tags(MessageSelector.by_tag("A || B")) == frozenset({"A", "B"})
    assert parse_tags(MessageSelector.by_sql("TAGS = 'A'")) is None  # the broker was exact
