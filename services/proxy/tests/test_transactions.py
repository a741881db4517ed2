"""ferry.proxy.transactions without a broker: the transaction id a client ends with, the half
message a check shows the client, and the Telemetry stream's merge of the client's commands
with the ones the proxy pushes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from msgspec.structs import replace

from ferry.client.message import MessageExt, MessageQueue
from ferry.protocol.messages import CheckTransactionStateNotice
from ferry.proxy.convert import body_digest
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, MessageType, definition
from ferry.proxy.transactions import (
    Transactions,
    TxToken,
    checked_message,
    decode,
    encode,
    interleave,
)

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
        encode(TxToken("broker-a", 1, 1 << 63, "m", "t")),  # not an offset the broker has
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
        await asyncio.sleep(0.01)  # wait-ok: a client's pace between commands
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


class FakeHalves:
    """What Transactions asks of its HalfProducer, without brokers."""

    def __init__(self) -> None:
        self.groups: set[str] = set()
        self.heartbeats = 0
        self.listener: Any = None

    def on_notice(self, listener: Any) -> None:
        self.listener = listener

    def heartbeat_soon(self) -> None:
        self.heartbeats += 1

    def check_message(self, notice: CheckTransactionStateNotice, address: str) -> MessageExt:
        return MessageExt("Orders", b"half", properties={"UNIQ_KEY": notice.msg_id})

    def broker_name(self, address: str) -> str | None:
        return "broker-a" if address == "tcp://127.0.0.1:10911" else None


def _publishing(*topics: str) -> Any:
    settings = definition.Settings()
    for topic in topics:
        settings.publishing.topics.add(name=topic)
    return settings


def test_a_check_goes_down_the_stream_of_a_producer_of_its_topic() -> None:
    async def run() -> None:
        halves = FakeHalves()
        txs = Transactions(halves)  # type: ignore[arg-type]
        txs.start()
        orders = txs.stream_opened("c-orders")
        other = txs.stream_opened("c-other")
        txs.settings_seen("c-orders", _publishing("Orders"))
        txs.settings_seen("c-other", _publishing("Payments"))
        assert halves.groups == {"Orders", "Payments"} and halves.heartbeats == 2

        notice = CheckTransactionStateNotice(
            producer_group="Orders",
            commit_log_offset=99,
            record=b"",
            msg_id="01AB",
            transaction_id="01AB",
            tran_state_table_offset=3,
        )
        halves.listener("tcp://127.0.0.1:10911", notice)
        command, from_client = orders.get_nowait()  # type: ignore[misc]
        assert not from_client and other.empty()
        recover = command.recover_orphaned_transaction_command
        assert recover.message.system_properties.message_id == "01AB"
        assert decode(recover.transaction_id) == TxToken("broker-a", 99, 3, "01AB", "01AB")

        # no producer of the group here, or a broker not known: nothing is pushed
        halves.listener("tcp://127.0.0.1:10911", replace(notice, producer_group="Nobody"))
        halves.listener("tcp://10.0.0.9:10911", notice)
        assert orders.empty() and other.empty()

        txs.stream_closed("c-orders", orders)
        assert halves.groups == {"Payments"}  # the next heartbeat leaves Orders
        halves.listener("tcp://127.0.0.1:10911", notice)
        assert other.empty()

    asyncio.run(run())
