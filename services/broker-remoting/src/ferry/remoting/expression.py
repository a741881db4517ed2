"""Tag subscription expressions: "*" or "TagA || TagB", as RocketMQ's FilterAPI reads them.

The store keeps the Java hash of each message's tag in the ConsumeQueue and filters pulls by
those hash codes; clients then match the tag strings exactly (hashes can collide).
"""

from __future__ import annotations

import functools

from ferry.protocol.errors import SubscriptionParseError
from ferry.protocol.record import java_string_hash

SUB_ALL = "*"
TAG_SEPARATOR = "||"
MAX_EXPRESSION_LENGTH = 4096


def parse_tags(expression: str) -> list[str]:
    """The tags an expression names; an empty list means every message."""
    text = expression.strip()
    if not text or text == SUB_ALL:
        return []
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise SubscriptionParseError(
            f"subscription expression is longer than {MAX_EXPRESSION_LENGTH} characters"
        )
    tags: list[str] = []
    for part in text.split(TAG_SEPARATOR):
        tag = part.strip()
        if not tag:
            continue  # RocketMQ skips empty parts ("TagA ||")
        if tag == SUB_ALL:
            raise SubscriptionParseError(
                f"'*' cannot be combined with tags in {expression!r}; use '*' alone"
            )
        if tag not in tags:
            tags.append(tag)
    if not tags:
        raise SubscriptionParseError(f"subscription expression {expression!r} names no tag")
    return tags


@functools.lru_cache(maxsize=1024)
def tag_codes(expression: str) -> tuple[int, ...]:
    """Hash codes to filter by; empty for '*'. Cached: consumers repeat the same expression."""
    return tuple(java_string_hash(tag) for tag in parse_tags(expression))
