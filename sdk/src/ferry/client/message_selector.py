"""What a subscription selects (RocketMQ's MessageSelector): tags ("*", "TagA || TagB") or an
SQL92 filter over the message's properties (TAGS included), which the broker evaluates
(broker.conf enablePropertyFilter=true).

    consumer.subscribe("orders", MessageSelector.by_sql("amount > 100 AND region = 'eu'"))

Wherever a subscription expression is taken, a plain string means tags, as before.
`wire_expression` turns either into what requests carry: (expression_type, expression).
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import SubscriptionData
from ferry.protocol.sql_filter import SQL92, TAG, check_sql

ALL = "*"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    expression_type: str  # "TAG" or "SQL92"
    expression: str

    @classmethod
    def by_tag(cls, expression: str = ALL) -> MessageSelector:
        """Tags: "*" for every message, or "TagA || TagB"."""
        return cls(TAG, expression)

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """An SQL92 filter, e.g. "a > 5 AND TAGS IN ('A', 'B')". Checked here: a bad one
        raises SqlFilterError (a SubscriptionParseError) naming its line and column."""
        check_sql(sql)
        return cls(SQL92, sql)

    @property
    def is_sql(self) -> bool:
        return self.expression_type == SQL92


# what subscribe() and friends take
Expression = str | MessageSelector


def as_selector(expression: Expression) -> MessageSelector:
    if isinstance(expression, MessageSelector):
        if expression.expression_type not in (TAG, SQL92):
            raise InvalidParameterError(
                f"expression type {expression.expression_type!r} is not {TAG} or {SQL92}"
            )
        return expression
    if isinstance(expression, str):
        return MessageSelector(TAG, expression)
    raise InvalidParameterError(f"{expression!r} is neither a tag expression nor a selector")


def wire_expression(expression: Expression) -> tuple[str, str]:
    """(expression_type, expression) as SubscriptionData and pull requests carry them."""
    selector = as_selector(expression)
    return selector.expression_type, selector.expression


def is_sql(expression: Expression) -> bool:
    return isinstance(expression, MessageSelector) and expression.is_sql


def subscription_data(topic: str, expression: Expression) -> SubscriptionData:
    """A subscription as heartbeats carry it."""
    expression_type, text = wire_expression(expression)
    return SubscriptionData(topic, text, expression_type)
