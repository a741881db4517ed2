"""Issue 6's proofs: message queries by key, unique key, offset id, queue offset and time,
across real namesrv, store, index and remoting processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from itest_support import Cluster, RawClient, wait_for
from typer.testing import CliRunner, Result

from ferry.admin import Admin
from ferry.admin import queries as q
from ferry.cli import admin as admin_cli
from ferry.cli import admin_messages  # noqa: F401  (registers queryMsgByOffset)
from ferry.cli import query as query_cli
from ferry.client import Message, MessageExt, MessageQueue, Producer, QueryNotFoundError
from ferry.protocol.messages import (
    DeleteExpiredCommitLogRequest,
    IndexRebuildRequest,
    IndexStatusReply,
    IndexStatusRequest,
    OkReply,
    StoreStatusReply,
    StoreStatusRequest,
)
from ferry.runtime.launcher import start_service

pytestmark = pytest.mark.integration


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class IndexHandle:
    """The cluster's index process: its status, and a kill and restart on the same endpoint."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        with Admin(cluster.namesrv) as admin:  # READY comes before the broker's registration
            wait_for(admin.master_addrs, 10, "the broker to register with the name server")
        self.endpoint = cluster.local.get("index").endpoints["endpoint"]
        self.client = RawClient(self.endpoint)
        self.store = RawClient(cluster.local.store_endpoint)

    def status(self) -> IndexStatusReply:
        reply, _ = self.client.call(IndexStatusRequest())
        assert isinstance(reply, IndexStatusReply)
        return reply

    def log_end(self) -> int:
        reply, _ = self.store.call(StoreStatusRequest())
        assert isinstance(reply, StoreStatusReply)
        return reply.max_offset

    def wait_caught_up(self, timeout: float = 30.0) -> IndexStatusReply:
        end = self.log_end()
        return wait_for(
            lambda: (s := self.status()).applied_offset >= end and not s.rebuilding and s,
            timeout,
            f"the index to reach CommitLog offset {end}",
        )

    def kill(self) -> None:
        self.cluster.local.get("index").kill()

    def restart(self) -> None:
        local = self.cluster.local
        old = local.get("index")
        local.processes.remove(old)
        overrides = {
            **self.cluster.overrides,
            "storePathRootDir": str(self.cluster.dir / "broker-a"),
            "storeEndpoint": local.store_endpoint,
            "storeFeedEndpoint": local.get("broker-store").endpoints["feed"],
            "indexEndpoint": self.endpoint,  # where remoting looks for it
        }
        args = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
        local.processes.append(start_service("index", args))

    def close(self) -> None:
        self.client.close()
        self.store.close()


@pytest.fixture
def index(cluster: Cluster) -> Iterator[IndexHandle]:
    handle = IndexHandle(cluster)
    yield handle
    handle.close()


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv) as a:
        yield a


def send_all(cluster: Cluster, msgs: list[Message], batch: int = 50) -> None:
    """Sends in batches, creating the topics first (not left to auto-creation)."""
    with Admin(cluster.namesrv) as admin:
        for topic in {m.topic for m in msgs}:
            admin.create_topic(topic, 4, 4)
    with Producer("pg-query", cluster.namesrv) as producer:
        for i in range(0, len(msgs), batch):
            producer.send_batch(msgs[i : i + batch])


def bodies(msgs: list[MessageExt]) -> list[bytes]:
    return [m.body for m in msgs]


def test_a_key_shared_by_many_messages_returns_them_newest_first(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    admin.create_topic("Shared", 4, 4)
    send_all(
        cluster, [Message("Shared", b"m%d" % i, keys=["shared", f"own-{i}"]) for i in range(120)]
    )
    index.wait_caught_up()
    found = q.query_msg_by_key(admin, "Shared", "shared", max_num=1000)
    assert sorted(bodies(found)) == sorted(b"m%d" % i for i in range(120))
    stamps = [(m.store_timestamp, m.commitlog_offset) for m in found]
    assert stamps == sorted(stamps, reverse=True)
    assert bodies(q.query_msg_by_key(admin, "Shared", "shared", max_num=10)) == bodies(found[:10])
    assert bodies(q.query_msg_by_key(admin, "Shared", "own-77")) == [b"m77"]
    assert q.query_msg_by_key(admin, "Shared", "nobody") == []
    assert q.query_msg_by_key(admin, "Shared", "shared", unique=True) == []


def test_time_range_bounds_are_inclusive_and_exclude_the_rest(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    groups: list[list[MessageExt]] = []
    for g in range(3):
        send_all(cluster, [Message("Timed", f"g{g}-{i}".encode(), keys=["t"]) for i in range(5)])
        index.wait_caught_up()
        found = q.query_msg_by_key(admin, "Timed", "t", max_num=100)
        groups.append([m for m in found if m.body.startswith(b"g%d" % g)])
        last = max(m.store_timestamp for m in found)
        wait_for(lambda last=last: now_ms() > last + 2, 5, "the clock to move on")
    middle = groups[1]
    lo = min(m.store_timestamp for m in middle)
    hi = max(m.store_timestamp for m in middle)
    got = q.query_msg_by_key(admin, "Timed", "t", max_num=100, begin_ms=lo, end_ms=hi)
    assert sorted(bodies(got)) == sorted(bodies(middle))
    assert q.query_msg_by_key(admin, "Timed", "t", begin_ms=hi + 1, end_ms=hi + 1) == []
    assert q.query_msg_by_key(admin, "Timed", "t", begin_ms=0, end_ms=lo - 1, max_num=100) != []
    newest = q.query_msg_by_key(admin, "Timed", "t", begin_ms=hi + 1, max_num=100)
    assert sorted(bodies(newest)) == sorted(bodies(groups[2]))


def test_a_topic_with_many_keys_finds_each_message_by_each_of_its_keys(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    msgs = [Message("ManyKeys", b"%d" % i, keys=[f"a{i}", f"b{i}", f"c{i}"]) for i in range(300)]
    send_all(cluster, msgs, batch=100)
    index.wait_caught_up()
    for i in range(300):
        for k in (f"a{i}", f"b{i}", f"c{i}"):
            assert bodies(q.query_msg_by_key(admin, "ManyKeys", k)) == [b"%d" % i], k
    assert index.status().entries == 300 * 4  # three keys and a msg id each, once


def test_unique_keys_offset_ids_and_queue_offsets_find_one_message(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    admin.create_topic("Ids", 4, 4)
    with Producer("pg-ids", cluster.namesrv) as producer:
        results = [producer.send(Message("Ids", b"id-%d" % i, tags="T")) for i in range(10)]
    index.wait_caught_up()
    sent = results[6]
    by_view = q.view_message(admin, sent.offset_msg_id)
    assert (by_view.body, by_view.msg_id, by_view.tags) == (b"id-6", sent.msg_id, "T")
    assert bodies(q.query_msg_by_id(admin, sent.offset_msg_id)) == [b"id-6"]
    assert bodies(q.query_msg_by_unique_key(admin, "Ids", sent.msg_id)) == [b"id-6"]
    assert bodies(q.query_msg_by_id(admin, sent.msg_id, "Ids")) == [b"id-6"]
    # as mqadmin: the id is tried as an offset id, then as a client id, in every topic
    assert bodies(q.query_msg_by_id(admin, sent.msg_id)) == [b"id-6"]
    with pytest.raises(QueryNotFoundError):
        q.query_msg_by_id(admin, "0A0000017D2A0000000000000000FFFF")  # neither kind
    at = q.query_msg_by_offset(admin, sent.queue, sent.queue_offset)
    assert at.body == b"id-6"
    with pytest.raises(QueryNotFoundError):
        q.query_msg_by_offset(admin, MessageQueue("Ids", sent.queue.broker_name, 0), 10_000)


def test_print_msg_lists_a_topic_by_store_time(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    send_all(cluster, [Message("Printed", b"early-%d" % i) for i in range(6)])
    early = list(q.print_msg(admin, "Printed"))
    cut = max(m.store_timestamp for m in early) + 1
    wait_for(lambda: now_ms() > cut, 5, "the clock to move on")
    send_all(cluster, [Message("Printed", b"late-%d" % i) for i in range(4)])
    assert sorted(bodies(list(q.print_msg(admin, "Printed", cut)))) == sorted(
        b"late-%d" % i for i in range(4)
    )
    assert sorted(bodies(list(q.print_msg(admin, "Printed", 0, cut - 1)))) == sorted(bodies(early))
    assert len(list(q.print_msg(admin, "Printed"))) == 10


def test_an_index_killed_while_producers_send_catches_up_and_answers_everything(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    admin.create_topic("Busy", 4, 4)
    sent: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer("pg-busy", cluster.namesrv) as producer:
            i = 0
            while not stop.is_set() and i < 5000:
                batch = [
                    Message("Busy", b"%d" % n, keys=[f"k{n}", "all"]) for n in range(i, i + 10)
                ]
                producer.send_batch(batch)
                sent.extend(f"k{n}" for n in range(i, i + 10))
                i += 10

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: len(sent) >= 200, 30, "the first sends")
        index.kill()
        killed_at = len(sent)
        wait_for(lambda: len(sent) >= killed_at + 300, 30, "sends while the index is down")
        index.restart()
        wait_for(lambda: len(sent) >= killed_at + 600, 30, "sends after the restart")
    finally:
        stop.set()
        producer.join(60)
    status = index.wait_caught_up(timeout=60)
    assert status.entries == len(sent) * 3  # two keys and a msg id each, never twice
    for key in sent:
        assert bodies(q.query_msg_by_key(admin, "Busy", key)) == [key[1:].encode()], key
    assert len(q.query_msg_by_key(admin, "Busy", "all", max_num=1000)) == min(1000, len(sent))


def test_a_rebuild_from_the_commitlog_gives_the_answers_of_the_incremental_index(
    cluster: Cluster, index: IndexHandle, admin: Admin
) -> None:
    msgs = [Message("Rebuilt", b"%d" % i, keys=[f"k{i % 7}", f"own{i}"]) for i in range(150)]
    send_all(cluster, msgs, batch=30)
    index.wait_caught_up()

    def answers() -> dict[str, list[tuple[str, int]]]:
        keys = [f"k{i}" for i in range(7)] + [f"own{i}" for i in range(0, 150, 11)]
        return {
            k: [
                (m.msg_id, m.commitlog_offset)
                for m in q.query_msg_by_key(admin, "Rebuilt", k, max_num=200)
            ]
            for k in keys
        }

    before = answers()
    before_status = index.status()
    reply, _ = index.client.call(IndexRebuildRequest())
    assert isinstance(reply, OkReply)
    after_status = index.wait_caught_up()
    assert answers() == before
    assert (after_status.entries, after_status.files) == (
        before_status.entries,
        before_status.files,
    )


def test_index_files_go_with_the_commitlog_segments_they_point_into(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(fileReservedTime="0", maxIndexNum="40", maxHashSlotNum="16")
    index = IndexHandle(cluster)
    try:
        body = os.urandom(60_000)  # 4 MiB segments: ~70 messages each (incompressible)
        with Admin(cluster.namesrv) as admin:
            admin.create_topic("Old", 4, 4)
        with Producer("pg-old", cluster.namesrv) as producer:
            for i in range(300):
                producer.send(Message("Old", body, keys=[f"k{i}"]))
        first = index.wait_caught_up()
        assert first.files >= 10
        with Admin(cluster.namesrv) as admin:
            assert len(q.query_msg_by_key(admin, "Old", "k0")) == 1
            broker = RawClient(cluster.broker_addr)
            reply, _ = broker.call(DeleteExpiredCommitLogRequest())
            broker.close()
            assert isinstance(reply, OkReply)
            gone = wait_for(
                lambda: (s := index.status()).store_min_offset > 0 and s.files < first.files and s,
                20,
                "index files below the CommitLog's new start to go",
            )
            assert gone.first_phys >= 0
            assert q.query_msg_by_key(admin, "Old", "k0") == []
            assert len(q.query_msg_by_key(admin, "Old", "k299")) == 1
        names = (tmp_path / "broker-a" / "index").iterdir()
        files = sorted(int(p.name) for p in names if p.name.isdigit())
        assert len(files) == gone.files
        # the oldest file kept still reaches past the log's start: the next one begins there
        assert files[1] > gone.store_min_offset
    finally:
        index.close()


def run_cli(*args: str) -> Result:
    """`ferry admin <args>` in-process, with the query commands registered."""
    assert query_cli.app is admin_cli.app
    return CliRunner().invoke(admin_cli.app, list(args), env={"COLUMNS": "250"})


def test_the_query_commands_print_tables_and_json(cluster: Cluster, index: IndexHandle) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Cli", 4, 4)
    with Producer("pg-cli", cluster.namesrv) as producer:
        results = [
            producer.send(Message("Cli", b"cli-%d" % i, tags="TagA", keys=["order-1", f"o{i}"]))
            for i in range(3)
        ]
    index.wait_caught_up()
    ns = ["-n", cluster.namesrv]
    by_key = run_cli("queryMsgByKey", *ns, "-t", "Cli", "-k", "order-1", "--json")
    assert by_key.exit_code == 0, by_key.output
    assert [m["body"] for m in json.loads(by_key.stdout)] == ["cli-2", "cli-1", "cli-0"]

    sent = results[1]
    by_id = run_cli("queryMsgById", *ns, "-i", sent.offset_msg_id)
    assert by_id.exit_code == 0, by_id.output
    assert "cli-1" in by_id.stdout
    assert "Store Timestamp" in by_id.stdout
    assert sent.msg_id in by_id.stdout
    # the msg id the producer printed works too (no topic needed), and --json keeps raw times
    by_client_id = run_cli("queryMsgById", *ns, "-i", sent.msg_id, "--json")
    assert by_client_id.exit_code == 0, by_client_id.output
    found = json.loads(by_client_id.stdout)
    assert (found["body"], found["offset_msg_id"]) == ("cli-1", sent.offset_msg_id)
    stored = found["store_timestamp"]
    assert isinstance(stored, int)
    # tables print times in UTC, to the ms, as 2026-11-26 18:40:01.371
    utc = dt.datetime.fromtimestamp(stored / 1000, tz=dt.UTC)
    shown = utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{stored % 1000:03d} UTC"
    assert shown in by_id.stdout
    assert str(stored) not in by_id.stdout

    unique = run_cli("queryMsgByUniqueKey", *ns, "-i", sent.msg_id, "-t", "Cli", "--json")
    assert unique.exit_code == 0, unique.output
    assert json.loads(unique.stdout)["offset_msg_id"] == sent.offset_msg_id

    queue = sent.queue
    at = run_cli(
        "queryMsgByOffset", *ns, "-t", "Cli", "-b", queue.broker_name,
        "-i", str(queue.queue_id), "-o", str(sent.queue_offset), "--json",
    )  # fmt: skip
    assert at.exit_code == 0, at.output
    assert json.loads(at.stdout)["body"] == "cli-1"

    printed = run_cli("printMsg", *ns, "-t", "Cli")
    assert printed.exit_code == 0, printed.output
    assert all(f"cli-{i}" in printed.stdout for i in range(3))

    missing = run_cli("queryMsgById", *ns, "-i", "00" * 16)
    assert missing.exit_code == 3  # not found (docs/operations.md: exit codes)
    assert "error" in missing.output
