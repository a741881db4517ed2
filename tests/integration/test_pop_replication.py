"""Pop checkpoints and acks are CommitLog records, so HA takes them to the slave: the slave's
copy of the revive log alone tells which popped message is still in flight."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from ha_support import start_pair
from itest_support import RawClient

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, Producer, SimpleConsumer
from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import (
    PopCheckpoint,
    ReviveAck,
    ReviveRecord,
    StoreGetReply,
    StoreGetRequest,
)
from ferry.protocol.names import revive_topic
from ferry.scheduler.revive_table import ReviveTable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_revive_records_reach_the_slave(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        with Admin(pair.namesrv) as admin:
            admin.create_topic("PopHa", 1, 1)
        with Producer("pg-pop-ha", pair.namesrv) as producer:
            for body in (b"acked", b"in-flight"):
                producer.send(Message("PopHa", body))
        got = []
        with SimpleConsumer(
            "cg-pop-ha",
            pair.namesrv,
            {"PopHa": "*"},
            await_duration=2.0,
            invisible_duration=300.0,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        ) as c:
            while len(got) < 2:
                got.extend(c.receive(2))
            acked = next(m for m in got if m.body == b"acked")
            c.ack(acked)
        pair.wait_in_sync()
        client = RawClient(pair.slave.store_endpoint)
        try:
            reply, frames = client.call(
                StoreGetRequest(topic=revive_topic("DefaultCluster"), queue_id=0, queue_offset=0)
            )
        finally:
            client.close()
        assert isinstance(reply, StoreGetReply) and reply.status == PullStatus.FOUND
        decoder = msgspec.msgpack.Decoder(ReviveRecord)
        table = ReviveTable()
        kinds = []
        for rec in record.iter_records(bytes(frames[0])):
            decoded = decoder.decode(rec.body)
            kinds.append(type(decoded))
            table.apply(rec.queue_offset, decoded)
        assert PopCheckpoint in kinds and ReviveAck in kinds
        # what a slave promoted to master would revive: the un-acked message only
        in_flight = table.in_flight_by_group()
        assert in_flight == {"cg-pop-ha": 1}
        (entry,) = table.in_flight.values()
        open_index = entry.open_indexes()
        assert [entry.checkpoint.queue_offsets[i] for i in open_index] == [
            next(m for m in got if m.body == b"in-flight").queue_offset
        ]
    finally:
        pair.close()
