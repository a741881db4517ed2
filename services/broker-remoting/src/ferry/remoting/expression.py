"""Subscription expressions: tags ("*" or "TagA || TagB", as RocketMQ's FilterAPI reads them)
or SQL92 filters (enablePropertyFilter).

The store keeps the Java hash of each message's tag in the ConsumeQueue and filters pulls by
those hash codes; clients then match the tag strings exactly (hashes can collide). An SQL92
filter goes to the store as it is, checked here first; the store tests each record with it.
"""

from __future__ import annotations

import functools

from ferry.protocol.errors import BrokerSystemError, SubscriptionParseError
from ferry.protocol.record import java_string_hash
from ferry.protocol.sql_filter import SQL92, TAG, check_sql

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


def store_filter(
    expression_type: str, expression: str, *, sql_enabled: bool, broker: str
) -> tuple[tuple[int, ...], str]:
    """What the store filters a subscription's pulls by: (tag codes, SQL92 text). Raises
    SubscriptionParseError for a bad expression, and refuses SQL92 unless sql_enabled."""
    if expression_type in ("", TAG):
        return tag_codes(expression), ""
    if expression_type != SQL92:
        raise SubscriptionParseError(
            f"expression type {expression_type!r} is not supported: {TAG} or {SQL92}"
        )
    if not sql_enabled:
        raise BrokerSystemError(
            "The broker does not support consumer to filter message by SQL92 "
            f"(enablePropertyFilter=false on broker {broker})",
            retriable=False,
        )
    check_sql(expression)  # compiled once; the store finds it in the same cache
    return (), expression


def check_heartbeat_subscription(
    expression_type: str, expression: str, *, served: bool, sql_enabled: bool, broker: str
) -> None:
    """A heartbeat's subscription, refused (raises) as its pulls would be: SQL92 ones only,
    and only for a topic this broker serves (a group's heartbeat goes to every broker of any
    of its topics; the others' are for their own brokers to judge)."""
    if served and expression_type not in ("", TAG):
        store_filter(expression_type, expression, sql_enabled=sql_enabled, broker=broker)
