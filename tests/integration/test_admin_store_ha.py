"""mqadmin's queryCq and haStatus through a pipe, against real processes: the entries are
those the store wrote (their offsets lead to the messages sent), and haStatus shows a real
slave's acknowledged offset."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from admin_pipe_support import admin_piped as piped
from admin_pipe_support import admin_run as run
from ha_support import start_pair, store_status
from itest_support import start_cluster, wait_for

from ferry.admin import Admin
from ferry.client import Message, MessageQueue, Producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "CqTopic_" + "of_the_north_warehouse_" * 3


def test_query_cq_reads_the_entries_the_store_wrote(tmp_path: Path) -> None:
    c = start_cluster(tmp_path)
    try:
        ns = c.namesrv
        piped(ns, "updateTopic", "-t", TOPIC, "-r", "2", "-w", "2")
        queue = MessageQueue(TOPIC, "broker-a", 1)
        with Producer("CqProducer", ns) as producer:
            sent = [
                producer.send(Message(TOPIC, f"body {i}".encode(), tags="TagA"), queue)
                for i in range(5)
            ]
        got = json.loads(
            piped(ns, "queryCq", "-t", TOPIC, "-q", "1", "-i", "1", "-c", "3", "--json")
        )
        assert got["broker"] == c.broker_addr
        assert (got["min_offset"], got["max_offset"]) == (0, 5)
        entries = got["entries"]
        assert [e["queue_offset"] for e in entries] == [1, 2, 3]
        with Admin(ns) as admin:
            for e, result in zip(entries, sent[1:4], strict=True):
                assert result.queue_offset == e["queue_offset"]
                msg = admin.view_message(result.offset_msg_id)
                assert msg.commitlog_offset == e["commitlog_offset"]
                assert msg.store_timestamp == e["store_ms"]
        sizes = [
            b["commitlog_offset"] - a["commitlog_offset"] for a, b in itertools.pairwise(entries)
        ]
        assert [e["size"] for e in entries[:-1]] == sizes  # records lie end to end
        assert len({e["tags_code"] for e in entries}) == 1  # one tag, one hash
        out = piped(ns, "queryCq", "-t", TOPIC, "-q", "1")
        rows = [ln.split() for ln in out.splitlines() if not ln.startswith("#") and ln.strip()]
        assert [r[0] for r in rows] == ["0", "1", "2", "3", "4"]
        assert c.broker_addr in out and TOPIC in out
        past = json.loads(piped(ns, "queryCq", "-t", TOPIC, "-q", "1", "-i", "9", "--json"))
        assert past["entries"] == []
        bad_queue = run(ns, "queryCq", "-t", TOPIC, "-q", "2")
        assert bad_queue.returncode == 2 and "queue 2" in bad_queue.stderr
        assert run(ns, "queryCq", "-t", TOPIC, "-q", "0", "-c", "0").returncode == 2
        assert run(ns, "queryCq", "-t", TOPIC, "-q", "0", "-i", "-1").returncode == 2
        assert run(ns, "queryCq", "-t", TOPIC).returncode == 2  # -q is required
        unknown = run(ns, "queryCq", "-t", "NoSuchTopic_xyz", "-q", "0")
        assert unknown.returncode == 3 and "NoSuchTopic_xyz" in unknown.stderr
    finally:
        c.local.stop()


def test_ha_status_shows_the_slave_and_its_acked_offset(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        ns = pair.namesrv
        piped(ns, "updateTopic", "-t", TOPIC, "-b", pair.master.broker_addr)
        with Producer("HaStatusProducer", ns) as producer:
            for i in range(3):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        end = pair.wait_in_sync()

        def acked() -> dict[str, object] | None:
            got = json.loads(piped(ns, "haStatus", "--json"))
            slaves = got[pair.master.broker_addr].get("slaves", [])
            return got if slaves and slaves[0].get("acked_offset") == end else None

        got = wait_for(acked, 30, "the slave's ack of the log end")
        assert got is not None
        master = got[pair.master.broker_addr]
        assert master["role"] == "ASYNC_MASTER"
        assert master["slaves"][0]["broker_id"] == 1 and master["slaves"][0]["in_sync"]
        out = piped(ns, "haStatus", "-b", pair.master.broker_addr)
        row = next(ln for ln in out.splitlines() if "slave 1" in ln)
        assert pair.master.broker_addr in row.split() and str(end) in row.split()
        assert "in sync" in row
        slave = json.loads(piped(ns, "haStatus", "-b", pair.slave.broker_addr, "--json"))
        mine = slave[pair.slave.broker_addr]
        assert mine["role"] == "SLAVE" and mine["connected"]
        assert mine["applied_offset"] == store_status(pair.slave).max_offset == end
        other = run(ns, "haStatus", "-c", "NoSuchCluster")  # an unknown cluster: a bad value
        assert other.returncode == 2 and "NoSuchCluster" in other.stderr
        # updateBrokerConfig -c: the masters; with -a true (updateAllBroker), the slaves too
        both = sorted([pair.master.broker_addr, pair.slave.broker_addr])
        key = ["-k", "enablePropertyFilter", "-c", "DefaultCluster", "--json"]
        assert json.loads(piped(ns, "updateBrokerConfig", *key, "-v", "true", "-a", "true")) == {
            "key": "enablePropertyFilter",
            "value": "true",
            "brokers": both,
        }
        done = json.loads(piped(ns, "updateBrokerConfig", *key, "-v", "false"))
        assert done["brokers"] == [pair.master.broker_addr]

        def filter_on(addr: str) -> str:
            got = json.loads(piped(ns, "getBrokerConfig", "-b", addr, "--json"))
            return str(got[addr]["enablePropertyFilter"])

        assert (filter_on(pair.master.broker_addr), filter_on(pair.slave.broker_addr)) == (
            "false",
            "true",
        )
    finally:
        pair.close()
