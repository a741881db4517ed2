"""ferry.client.aio with authentication and tlsEnable on: credentials= and tls_server_key= as
the sync clients take them, and a refusal is the sync SDK's error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import Cluster, start_cluster
from security_support import ROOT, SECURITY, generate_keys

from ferry.admin.aio import Admin
from ferry.client import ConnectionFailedError, FerryError, Message, SendStatus
from ferry.client import Producer as SyncProducer
from ferry.client.aio import Producer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    base = Path(tmp_path_factory.mktemp("aio-secure"))
    keys = generate_keys(base / "keys")
    c = start_cluster(base / "data", overrides={**SECURITY, **keys})
    try:
        yield c, str(base / "keys" / "server.key")
    finally:
        c.local.stop()


def test_credentials_and_tls_key_as_the_sync_clients_take_them(
    secure: tuple[Cluster, str],
) -> None:
    cluster, server_key = secure
    ns = cluster.namesrv

    def sync_refusal() -> FerryError:
        with (
            SyncProducer("aio-sec-sync", ns, tls_server_key=server_key) as producer,
            pytest.raises(FerryError) as caught,
        ):
            producer.send(Message("AioSecret", b"x"))
        return caught.value

    async def scenario() -> None:
        async with Admin(ns, credentials=ROOT, tls_server_key=server_key) as admin:
            await admin.create_topic("AioSecret", 2, 2)
        async with Producer("aio-sec", ns, credentials=ROOT, tls_server_key=server_key) as p:
            assert (await p.send(Message("AioSecret", b"signed"))).status is SendStatus.SEND_OK
        async with Producer("aio-sec-anon", ns, tls_server_key=server_key) as anonymous:
            with pytest.raises(FerryError) as refused:
                await anonymous.send(Message("AioSecret", b"x"))
        expected = sync_refusal()
        assert (type(refused.value), refused.value.code) == (type(expected), expected.code)
        async with Producer("aio-sec-plain", ns, credentials=ROOT, send_timeout_ms=1500) as plain:
            with pytest.raises(ConnectionFailedError, match="handshake"):
                await plain.send(Message("AioSecret", b"x"))

    asyncio.run(asyncio.wait_for(scenario(), 60))
