import pytest

from ferry.protocol.errors import BrokerSystemError, SubscriptionParseError
from ferry.remoting.expression import (
    check_heartbeat_subscription,
    parse_tags,
    store_filter,
    tag_codes,
)

# Java: "TagA".hashCode(), "TagB".hashCode()
TAG_A = 2598919
TAG_B = 2598920


@pytest.mark.parametrize("expression", ["*", "", "  *  "])
def test_star_or_empty_selects_everything(expression: str) -> None:
    assert parse_tags(expression) == []
    assert tag_codes(expression) == ()


def test_tags_are_split_trimmed_and_deduplicated() -> None:
    assert parse_tags("TagA || TagB||TagA ||") == ["TagA", "TagB"]


def test_tag_codes_are_java_string_hashes() -> None:
    assert tag_codes("TagA") == (TAG_A,)
    assert tag_codes("TagA || TagB") == (TAG_A, TAG_B)


def test_non_ascii_tags_hash_as_java_does() -> None:
    # Java: "标签".hashCode() == 26631 * 31 + 31614
    assert tag_codes("标签") == (26631 * 31 + 31614,)


@pytest.mark.parametrize("expression", ["||", " || || ", "TagA || *", "x" * 5000])
def test_bad_expression_is_a_parse_error(expression: str) -> None:
    with pytest.raises(SubscriptionParseError):
        parse_tags(expression)


def test_store_filter_passes_tags_as_codes_and_sql_as_text() -> None:
    assert store_filter("TAG", "A || B", sql_enabled=False, broker="b") == (
        tag_codes("A || B"),
        "",
    )
    assert store_filter("", "*", sql_enabled=False, broker="b") == ((), "")
    assert store_filter("SQL92", "a > 5", sql_enabled=True, broker="b") == ((), "a > 5")


def test_store_filter_refuses_sql_unless_enabled_and_bad_sql_with_its_position() -> None:
    with pytest.raises(BrokerSystemError, match="does not support consumer to filter") as err:
        store_filter("SQL92", "a > 5", sql_enabled=False, broker="broker-a")
    assert not err.value.retriable
    with pytest.raises(SubscriptionParseError, match="line 1, column 7"):
        store_filter("SQL92", "a > 5 5", sql_enabled=True, broker="b")
    with pytest.raises(SubscriptionParseError, match="not supported"):
        store_filter("CLASS", "x", sql_enabled=True, broker="b")


def test_a_heartbeat_is_refused_only_for_sql_on_a_topic_served_here() -> None:
    check_heartbeat_subscription("TAG", "A", served=True, sql_enabled=False, broker="b")
    # another broker's topic: its own broker judges it
    check_heartbeat_subscription("SQL92", "a >", served=False, sql_enabled=False, broker="b")
    with pytest.raises(BrokerSystemError):
        check_heartbeat_subscription("SQL92", "a > 1", served=True, sql_enabled=False, broker="b")
    with pytest.raises(SubscriptionParseError):
        check_heartbeat_subscription("SQL92", "a >", served=True, sql_enabled=True, broker="b")
