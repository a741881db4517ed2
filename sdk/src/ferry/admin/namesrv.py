"""mqadmin's name server administration: its config (getNamesrvConfig, updateNamesrvConfig)
and its kv store (updateKvConfig, deleteKvConfig, updateOrderConf). Name servers share
nothing, so each change is sent to every name server the Admin was given, as mqadmin does."""

from __future__ import annotations

from ferry.admin.locator import BrokerLocator
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import (
    DeleteKvConfigRequest,
    GetKvConfigRequest,
    GetNamesrvConfigRequest,
    KvConfigReply,
    KvDeletedReply,
    NamesrvConfigReply,
    OkReply,
    PutKvConfigRequest,
    UpdateNamesrvConfigRequest,
)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def namesrv_config(brokers: BrokerLocator) -> dict[str, NamesrvConfigReply]:
    """Per name server, the keys in force and those that change live."""
    return brokers.each_namesrv(GetNamesrvConfigRequest(), NamesrvConfigReply)


def update_namesrv_config(brokers: BrokerLocator, properties: dict[str, str]) -> list[str]:
    """Changes live keys on every name server; returns their addresses."""
    if not properties:
        raise InvalidParameterError("no key to update")
    return sorted(brokers.each_namesrv(UpdateNamesrvConfigRequest(properties), OkReply))


def put_kv(brokers: BrokerLocator, namespace: str, key: str, value: str) -> list[str]:
    return sorted(brokers.each_namesrv(PutKvConfigRequest(namespace, key, value), OkReply))


def get_kv(brokers: BrokerLocator, namespace: str, key: str) -> dict[str, str | None]:
    """Per name server, the value (None where it has none)."""
    replies = brokers.each_namesrv(GetKvConfigRequest(namespace, key), KvConfigReply)
    return {a: r.value if r.found else None for a, r in sorted(replies.items())}


def delete_kv(brokers: BrokerLocator, namespace: str, key: str) -> dict[str, bool]:
    """Per name server, whether it had the key."""
    replies = brokers.each_namesrv(DeleteKvConfigRequest(namespace, key), KvDeletedReply)
    return {a: r.existed for a, r in sorted(replies.items())}


def check_order_conf(value: str) -> None:
    """`brokerName:queueNums;...`, as RocketMQ's ORDER_TOPIC_CONFIG holds."""
    for part in value.split(";"):
        name, sep, count = part.strip().partition(":")
        if not sep or not name.strip() or not count.strip().isdigit():
            raise InvalidParameterError(
                f"order conf {value!r}: each part must be brokerName:queueNums, not {part!r}"
            )
