"""ferry.proxy.transactions without a broker: the transaction id a client ends with, the half
message a check shows the client, and the Telemetry stream's merge of the client's commands
with the ones the proxy pushes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ferry.client.message import MessageExt, MessageQueue
from ferry.proxy.convert import body_digest
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, MessageType
from ferry.proxy.transactions import TxToken, checked_message, decode, encode, interleave

TOKEN = TxToken("broker-a", 123_456, 7, "0102FC0000000127150B22CF0600000000", "tx-1")


def test_a_transaction_id_carries_what_ends_the_half() -> None:
    text = encode(TOKEN)
    assert text.startswith("T1") and "\n" not in text
    assert decode(text) == TOKEN


@pytest.mark.parametrize(
    "text",
    [
        "",
        "F1abc",  # a receipt handle, not a transaction id
        "T1!!!",
        encode(TOKEN)[:20],  # cut short
        encode(TxToken("broker-a", -1, 0, "m", "t")),
        encode(TxToken("", 1, 0, "m", "t")),
        "T1" + "A" * 2000,
    ],
)
def test_anything_else_is_an_invalid_transaction_id(text: str) -> None:
    with pytest.raises(ProxyError) as refused:
        decode(text)
    assert refused.value.code is Code.INVALID_TRANSACTION_ID


def test_a_checked_half_shows_its_real_topic_and_the_client_id() -> None:
    msg = MessageExt(
        "ns%Orders",
        b"body",
        tags="TagA",
        keys=["k1"],
        properties={
            "UNIQ_KEY": "01AB",
            "color": "blue",
            "TRAN_MSG": "true",
            "PGROUP": "ns%Orders",
            "REAL_TOPIC": "ns%Orders",
        },
        queue=MessageQueue("ns%Orders", "broker-a", 2),
    )
    out = checked_message(msg)
    assert (out.topic.resource_namespace, out.topic.name) == ("ns", "Orders")
    assert dict(out.user_properties) == {"color": "blue"}
    sp = out.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys)) == ("01AB", "TagA", ["k1"])
    assert sp.message_type == MessageType.TRANSACTION
    assert sp.body_digest.checksum == body_digest(b"body")  # the client checks it


async def _commands(items: list[str], started: asyncio.Event, fail: bool) -> AsyncIterator[str]:
    for item in items:
        yield item
        started.set()
        await asyncio.sleep(0.01)
    if fail:
        raise ConnectionError("client gone")


def test_interleave_yields_both_sides_and_ends_with_the_client() -> None:
    async def run(fail: bool) -> list[tuple[Any, bool]]:
        pushed: asyncio.Queue[tuple[Any, bool] | None] = asyncio.Queue()
        started = asyncio.Event()
        got = []
        async for item in interleave(_commands(["a", "b"], started, fail), pushed):
            got.append(item)
            if item == ("a", True):
                pushed.put_nowait(("check", False))
        return got

    assert asyncio.run(run(False)) == [("a", True), ("check", False), ("b", True)]
    with pytest.raises(ConnectionError):
        asyncio.run(run(True))
