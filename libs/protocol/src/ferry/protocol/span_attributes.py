"""Span attributes of the OpenTelemetry messaging conventions for RocketMQ, built in one place.

Every service and the SDK name their spans' attributes through messaging(): the same keys
for the same facts everywhere (`messaging.system=rocketmq`, `messaging.rocketmq.*`), as the
opentelemetry-contrib instrumentations do. Plain dicts, no OpenTelemetry import: the client
depends on ferry.protocol, and a dict is what the tracer takes.
"""

from __future__ import annotations

from typing import Any

SYSTEM = "rocketmq"

AttributeValue = str | int | bool | list[str]


def messaging(
    operation: str = "",
    *,
    operation_type: str = "",
    destination: str = "",
    partition: int | None = None,
    consumer_group: str = "",
    message_id: str = "",
    batch_count: int = 0,
    batching: bool = False,
    conversation_id: str = "",
    client_id: str = "",
    rocketmq: dict[str, AttributeValue] | None = None,
) -> dict[str, Any]:
    """The attributes of one messaging span; empty arguments are left out. `rocketmq` holds
    the RocketMQ-specific ones by their name after `messaging.rocketmq.` (e.g. client_group,
    message.type, transaction.resolution). A batch count is named above 1, or from 1 with
    `batching` (an operation of a batching API, e.g. a receive: its count is a fact even
    when one message came). Typed Any so it spreads into a tracer's keyword arguments; the
    values are AttributeValue."""
    attributes: dict[str, Any] = {"messaging.system": SYSTEM}
    if operation_type:
        attributes["messaging.operation.type"] = operation_type
    if operation:
        attributes["messaging.operation.name"] = operation
    if destination:
        attributes["messaging.destination.name"] = destination
    if partition is not None:
        attributes["messaging.destination.partition.id"] = str(partition)
    if consumer_group:
        attributes["messaging.consumer.group.name"] = consumer_group
    if message_id:
        attributes["messaging.message.id"] = message_id
    if batch_count > 1 or (batching and batch_count > 0):
        attributes["messaging.batch.message_count"] = batch_count
    if conversation_id:
        attributes["messaging.message.conversation_id"] = conversation_id
    if client_id:
        attributes["messaging.client.id"] = client_id
    if rocketmq:
        for name, value in rocketmq.items():
            attributes[f"messaging.rocketmq.{name}"] = value
    return attributes
