import pytest

from ferry.protocol.errors import SubscriptionParseError
from ferry.remoting.expression import parse_tags, tag_codes

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
