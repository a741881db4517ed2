"""HA replication with real processes: a master group and a slave group (same brokerName,
brokerId 1) on real stores, the slave's ha-replicator streaming the master's CommitLog."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from ha_support import HaPair, broker_ids, ha_status, start_pair, status, store_status
from itest_support import wait_for

from ferry.client import Message, Producer, SendResult, SendStatus
from ferry.protocol import record
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import ViewMessageReply, ViewMessageRequest

# two broker groups start per test: on a loaded 2-core machine that alone can take a minute
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def slave_record(pair: HaPair, phys_offset: int) -> record.Record:
    from itest_support import RawClient

    client = RawClient(pair.slave.broker_addr)
    try:
        reply, payload = client.call(ViewMessageRequest(phys_offset=phys_offset))
    finally:
        client.close()
    assert isinstance(reply, ViewMessageReply), reply
    return next(record.iter_records(bytes(payload[0])))


def test_sync_master_acknowledged_sends_survive_a_kill_9_of_the_master(tmp_path: Path) -> None:
    pair = start_pair(tmp_path, brokerRole="SYNC_MASTER")
    try:
        assert broker_ids(pair.namesrv) == {0, 1}  # the route shows the slave
        acked: list[SendResult] = []
        failed: list[str] = []
        stop = threading.Event()

        def produce(n: int) -> None:
            with Producer(f"ha-p{n}", pair.namesrv, send_timeout_ms=2000, retry_times=0) as p:
                i = 0
                while not stop.is_set():
                    try:
                        r = p.send(Message("HaSync", f"{n}-{i}".encode() * 20, keys=[f"{n}-{i}"]))
                    except FerryError as err:
                        failed.append(str(err))
                        if len(failed) > 3:
                            return
                        continue
                    finally:
                        i += 1
                    if r.status is SendStatus.SEND_OK:
                        acked.append(r)

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 300, 30, "300 acknowledged sends")
        pair.stop_master(kill=True)  # kill -9 under load
        stop.set()
        for t in threads:
            t.join(20)
        assert len(acked) >= 300
        # every acknowledged message is on the slave, at the master's offset, byte for byte
        for r in acked:
            _, phys = record.decode_offset_msg_id(r.offset_msg_id)
            rec = slave_record(pair, phys)
            assert rec.properties[record.PROPERTY_UNIQ_KEY] == r.msg_id
            assert rec.topic == "HaSync"
    finally:
        pair.close()


def test_sync_master_reports_slave_timeout_and_slave_not_available(tmp_path: Path) -> None:
    pair = start_pair(tmp_path, brokerRole="SYNC_MASTER", syncFlushTimeout="300")
    try:
        with Producer("ha-status", pair.namesrv, retry_times=0) as producer:
            assert producer.send(Message("HaStatus", b"ok")).status is SendStatus.SEND_OK
            slave_ha = pair.slave.get("ha-replicator")
            os.kill(slave_ha.pid, signal.SIGSTOP)  # connected but silent: acks stop
            try:
                r = producer.send(Message("HaStatus", b"late"))
                assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT
            finally:
                os.kill(slave_ha.pid, signal.SIGCONT)
            wait_for(
                lambda: producer.send(Message("HaStatus", b"again")).status is SendStatus.SEND_OK,
                10,
                "acks again",
            )
            pair.stop_slave()

            def not_available() -> bool:
                r = producer.send(Message("HaStatus", b"alone"))
                return r.status is SendStatus.SLAVE_NOT_AVAILABLE

            wait_for(not_available, 15, "SLAVE_NOT_AVAILABLE once the slave is gone")
        # stored on the master either way: 1 + late + again(s) + alone(s)
        assert store_status(pair.master).max_offset > 0
    finally:
        pair.close()


def test_async_master_lag_and_slave_restart_catch_up(tmp_path: Path) -> None:
    pair = start_pair(tmp_path, brokerRole="ASYNC_MASTER")
    try:
        with Producer("ha-async", pair.namesrv) as producer:
            started = time.monotonic()
            for i in range(20):
                producer.send_batch(
                    [Message("HaAsync", f"{i}-{j}".encode() * 50) for j in range(50)]
                )
            sent_s = time.monotonic() - started
            end = pair.wait_in_sync()
            lag_s = time.monotonic() - started - sent_s
            print(
                f"ASYNC_MASTER: 1000 msgs in {sent_s:.3f}s, "
                f"slave caught up {lag_s * 1000:.0f} ms later"
            )
            # the slave's log ends where the master's does before its ack reaches the master
            wait_for(
                lambda: ha_status(pair.master).slaves[0].acked_offset == end,
                10,
                "the master to see the slave's ack of the whole log",
            )
            before = ha_status(pair.slave).bytes_received

            pair.stop_slave()
            for i in range(10):
                producer.send_batch(
                    [Message("HaAsync", f"late-{i}-{j}".encode()) for j in range(50)]
                )
            new_end = store_status(pair.master).max_offset
        pair.start_slave()
        assert store_status(pair.slave).recovered_offset == end  # restarts at its own end ...
        pair.wait_in_sync()
        got = ha_status(pair.slave)
        assert got.applied_offset == new_end
        assert got.bytes_received == new_end - end  # ... receiving only what it missed
        assert before == end

        def queued_on_slave() -> int:
            reply = status(pair.slave.broker_addr, _stats("HaAsync"))
            return sum(q.max_offset for q in getattr(reply, "queues", []))

        # the slave's ConsumeQueues follow (its remoting knows the topic after a metadata sync)
        wait_for(lambda: queued_on_slave() == 1500, 10, "1500 messages queued on the slave")
    finally:
        pair.close()


def _stats(topic: str):  # type: ignore[no-untyped-def]
    from ferry.protocol.messages import GetTopicStatsRequest

    return GetTopicStatsRequest(topic=topic)


def test_a_slave_whose_log_diverged_is_refused(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        with Producer("ha-div", pair.namesrv) as producer:
            producer.send_batch([Message("HaDiv", b"a" * 200) for _ in range(20)])
        slave_end = pair.wait_in_sync()
        pair.stop_slave()
        pair.stop_master()
        pair.start_master(wipe=True)  # a different master: a new, empty store
        with Producer("ha-div2", pair.namesrv) as producer:
            while store_status(pair.master).max_offset <= slave_end:  # longer than the slave's
                producer.send_batch([Message("HaDiv", b"b" * 300) for _ in range(20)])
        pair.start_slave()
        refused = wait_for(lambda: ha_status(pair.slave).error, 15, "the master's refusal")
        assert "diverged" in refused
        got = ha_status(pair.slave)
        assert not got.connected
        assert store_status(pair.slave).max_offset == slave_end  # nothing merged
        assert ha_status(pair.master).slaves == []
    finally:
        pair.close()
