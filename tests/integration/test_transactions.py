"""Issue 5, transactions: half messages, END_TRANSACTION, checkback, across real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster, OtlpSink, RawClient, wait_for
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
    TransactionProducer,
)
from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode, TransactionResolution
from ferry.protocol.messages import (
    EndTransactionRequest,
    ErrorReply,
    OkReply,
    SendMessageRequest,
    StoreGetReply,
    StoreGetRequest,
    StorePutReply,
    StorePutRequest,
    TransactionCheckStatusReply,
    TransactionCheckStatusRequest,
    ViewMessageReply,
    ViewMessageRequest,
)
from ferry.protocol.names import (
    TRAN_END_COMMITTING,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferry.remoting.transaction_records import committed_record, op_record
from ferry.runtime.launcher import start_service
from ferry.runtime.testing.cluster import running_cluster

pytestmark = pytest.mark.integration

FERRY = str(Path(sys.executable).parent / "ferry")

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
# short check periods, so that checks come within seconds (RocketMQ: 6 s, 60 s, 15)
CHECKS = {
    "transactionTimeOut": "1000",
    "transactionCheckInterval": "300",
    "transactionCheckMax": "3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[Cluster]:
    """One cluster for the module, its services sending spans to `sink`: each test has its own
    topic and groups, and looks only at its own half messages in the shared system topics."""
    with running_cluster(tmp_path_factory.mktemp("tx"), env=sink.env(), overrides=CHECKS) as c:
        yield c


class Listener:
    """Answers with what the test set per key; records every call."""

    def __init__(self, first: LocalTransactionState, check: LocalTransactionState) -> None:
        self.first = first
        self.check = check
        self.executed: list[tuple[str, Any]] = []
        self.checked: list[MessageExt] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self.lock:
            self.executed.append((msg.keys[0] if msg.keys else "", arg))
        return self.first

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append(msg)
        return self.check


def store_records(cluster: Cluster, topic: str, queue_id: int = 0) -> list[record.Record]:
    """Every record of a queue, read from broker-store directly (system topics have no
    route)."""
    client = RawClient(cluster.local.store_endpoint)
    try:
        out: list[record.Record] = []
        offset = 0
        while True:
            body, frames = client.call(
                StoreGetRequest(topic=topic, queue_id=queue_id, queue_offset=offset, max_msgs=256)
            )
            assert isinstance(body, StoreGetReply)
            if body.status != PullStatus.FOUND:
                return out
            out.extend(record.iter_records(bytes(frames[0])))
            offset = body.next_begin_offset
    finally:
        client.close()


def consume(namesrv: str, group: str, topic: str, want: int, wait_s: float) -> list[MessageExt]:
    """What a consumer group sees of `topic` from its start within wait_s (stops at `want`)."""
    got: list[MessageExt] = []
    with PullConsumer(group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + wait_s
        while len(got) < want and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout=0.5))
    return got


def create_topic(cluster: Cluster, topic: str) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, 2, 2)


def real_records(cluster: Cluster, topic: str, queues: int = 2) -> list[record.Record]:
    return [r for q in range(queues) for r in store_records(cluster, topic, q)]


def half_offset(result: SendResult) -> int:
    return record.decode_offset_msg_id(result.offset_msg_id)[1]


def ends(cluster: Cluster, *results: SendResult) -> list[str]:
    """How the half messages of these sends ended, by their op records, in log order."""
    mine = {str(half_offset(r)).encode() for r in results}
    ops = store_records(cluster, TRANS_OP_HALF_TOPIC)
    found = [op.properties["TRAN_END"] for op in ops if op.body in mine]
    return [end for end in found if end != TRAN_END_COMMITTING]  # a commit's mark is no end


def discarded(cluster: Cluster, *results: SendResult) -> list[record.Record]:
    ids = {r.msg_id for r in results}
    found = store_records(cluster, TRANS_CHECK_MAX_TIME_TOPIC)
    return [r for r in found if r.properties.get(record.PROPERTY_UNIQ_KEY) in ids]


def test_commit_delivers_the_message_with_its_id_keys_and_properties(cluster: Cluster) -> None:
    create_topic(cluster, "TxCommit")
    listener = Listener(COMMIT, COMMIT)
    with TransactionProducer("pg-tx-commit", cluster.namesrv, listener) as producer:
        msg = Message("TxCommit", b"paid", tags="Pay", keys=["order-1"], properties={"a": "b"})
        result = producer.send_in_transaction(msg, arg=42)
    assert result.status is SendStatus.SEND_OK
    assert result.local_transaction_state is COMMIT
    assert listener.executed == [("order-1", 42)]
    got = consume(cluster.namesrv, "cg-tx-commit", "TxCommit", 1, 20)
    assert len(got) == 1
    m = got[0]
    assert (m.topic, m.body, m.tags, m.keys, m.msg_id) == (
        "TxCommit",
        b"paid",
        "Pay",
        ["order-1"],
        result.msg_id,
    )
    assert m.properties["a"] == "b"
    assert m.queue == result.queue
    assert m.sysflag & record.SYSFLAG_TX_COMMIT
    assert record.PROPERTY_REAL_TOPIC not in m.properties
    # the half message stays aside; the op record says how it ended
    halves = store_records(cluster, TRANS_HALF_TOPIC)
    half = next(h for h in halves if h.phys_offset == half_offset(result))
    assert half.properties[record.PROPERTY_REAL_TOPIC] == "TxCommit"
    assert half.properties[record.PROPERTY_PGROUP] == "pg-tx-commit"
    wait_for(lambda: ends(cluster, result) == ["COMMIT"], 15, "the op record")


def test_rollback_is_never_delivered(cluster: Cluster) -> None:
    create_topic(cluster, "TxRollback")
    listener = Listener(ROLLBACK, ROLLBACK)
    with TransactionProducer("pg-tx-rollback", cluster.namesrv, listener) as producer:
        result = producer.send_in_transaction(Message("TxRollback", b"cancelled", keys="o-2"))
        marker = producer.send(Message("TxRollback", b"marker"))
    # a second end of the same half message (a late check answer) changes nothing
    again = end_again(cluster, "pg-tx-rollback", result, TransactionResolution.COMMIT)
    assert isinstance(again, OkReply)
    assert result.local_transaction_state is ROLLBACK
    assert [r.body for r in real_records(cluster, "TxRollback")] == [b"marker"]
    assert [m.msg_id for m in consume(cluster.namesrv, "cg-tx-rb", "TxRollback", 1, 20)] == [
        marker.msg_id
    ]
    assert ends(cluster, result) == ["ROLLBACK"]


def test_ends_of_what_is_not_a_half_message_are_refused(cluster: Cluster) -> None:
    create_topic(cluster, "TxBadInput")
    with Producer("pg-tx-bad", cluster.namesrv) as producer:
        plain = producer.send(Message("TxBadInput", b"plain"))
    client = RawClient(cluster.broker_addr)
    try:
        refusals = [
            # a normal message is no half message
            EndTransactionRequest(
                producer_group="pg-tx-bad",
                commit_log_offset=half_offset(plain),
                resolution=TransactionResolution.COMMIT,
            ),
            # an offset where no record starts
            EndTransactionRequest(
                producer_group="pg-tx-bad",
                commit_log_offset=half_offset(plain) + 3,
                resolution=TransactionResolution.COMMIT,
            ),
            EndTransactionRequest(producer_group="pg-tx-bad", commit_log_offset=0, resolution=5),
        ]
        for request in refusals:
            body, _ = client.call(request)
            assert isinstance(body, ErrorReply), request
        records = record.encode_record(b"TxBadInput", b"x", b"") * 2
        body, _ = client.call(
            SendMessageRequest(
                producer_group="pg-tx-bad",
                topic="TxBadInput",
                queue_id=0,
                count=2,
                transactional=True,
            ),
            [records],
        )
        assert isinstance(body, ErrorReply) and body.code == ResponseCode.INVALID_PARAMETER
    finally:
        client.close()
    assert [r.body for r in real_records(cluster, "TxBadInput")] == [b"plain"]


# ---- checkback: the check-back service asks a producer of the group -------------------------


def test_unknown_then_check_commits(cluster: Cluster) -> None:
    create_topic(cluster, "TxCheckCommit")
    listener = Listener(UNKNOWN, COMMIT)
    with TransactionProducer("pg-tx-cc", cluster.namesrv, listener) as producer:
        msg = Message("TxCheckCommit", b"later", keys="o-3", properties={"k": "v"})
        result = producer.send_in_transaction(msg)
        assert result.local_transaction_state is UNKNOWN
        assert real_records(cluster, "TxCheckCommit") == []
        got = consume(cluster.namesrv, "cg-tx-cc", "TxCheckCommit", 1, 30)
    assert [(m.msg_id, m.body, m.properties["k"]) for m in got] == [(result.msg_id, b"later", "v")]
    checked = listener.checked[0]
    assert (checked.topic, checked.msg_id, checked.keys) == (
        "TxCheckCommit",
        result.msg_id,
        ["o-3"],
    )
    assert checked.queue == result.queue
    wait_for(lambda: ends(cluster, result) == ["COMMIT"], 15, "the op record")


def test_unknown_then_check_rolls_back(cluster: Cluster) -> None:
    create_topic(cluster, "TxCheckRollback")
    listener = Listener(UNKNOWN, ROLLBACK)
    with TransactionProducer("pg-tx-cr", cluster.namesrv, listener) as producer:
        result = producer.send_in_transaction(Message("TxCheckRollback", b"never"))
        wait_for(lambda: ends(cluster, result) == ["ROLLBACK"], 30, "the check's rollback")
    assert real_records(cluster, "TxCheckRollback") == []
    assert len(listener.checked) == 1


def test_a_new_producer_of_the_group_answers_when_the_first_is_gone(cluster: Cluster) -> None:
    create_topic(cluster, "TxNewProducer")
    first = Listener(UNKNOWN, UNKNOWN)
    with TransactionProducer("pg-tx-np", cluster.namesrv, first) as producer:
        result = producer.send_in_transaction(Message("TxNewProducer", b"handed over"))
    second = Listener(COMMIT, COMMIT)
    with TransactionProducer("pg-tx-np", cluster.namesrv, second) as producer:
        got = consume(cluster.namesrv, "cg-tx-np", "TxNewProducer", 1, 30)
    assert [m.msg_id for m in got] == [result.msg_id]
    assert [m.msg_id for m in second.checked][:1] == [result.msg_id]


def test_a_half_message_never_answered_goes_to_the_check_max_topic(cluster: Cluster) -> None:
    create_topic(cluster, "TxCheckMax")
    listener = Listener(UNKNOWN, UNKNOWN)
    with TransactionProducer("pg-tx-max", cluster.namesrv, listener) as producer:
        result = producer.send_in_transaction(Message("TxCheckMax", b"undecided"))
        copies = wait_for(lambda: discarded(cluster, result), 40, "the discard")
    assert [r.body for r in copies] == [b"undecided"]
    assert copies[0].prepared_tx_offset == half_offset(result)
    assert len(listener.checked) == 3  # transactionCheckMax
    # an answer coming after the discard changes nothing: the message is never delivered
    late = end_again(cluster, "pg-tx-max", result, TransactionResolution.COMMIT)
    assert isinstance(late, OkReply)
    assert real_records(cluster, "TxCheckMax") == []
    assert ends(cluster, result) == []
    # what `ferry admin schedulerStatus` shows (through remoting)
    done = subprocess.run(
        [
            *(FERRY, "admin", "schedulerStatus", "--json"),
            *("-n", cluster.namesrv, "-b", cluster.broker_addr),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["extra"]
    assert int(shown["transactionCheckMaxDiscarded"]) >= 1
    assert int(shown["transactionChecksSent"]) >= 3


# ---- telemetry -----------------------------------------------------------------------------


def test_a_checked_transaction_is_one_trace_across_sdk_remoting_and_checkback(
    cluster: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    traced = cluster
    create_topic(traced, "TxTraced")
    listener = Listener(UNKNOWN, COMMIT)
    with TransactionProducer("pg-tx-traced", traced.namesrv, listener) as producer:
        result = producer.send_in_transaction(Message("TxTraced", b"follow me"))
        wait_for(lambda: ends(traced, result) == ["COMMIT"], 30, "the check's commit")
    mine = {s.name: s for s in spans.get_finished_spans()}
    send = mine["send TxTraced"]
    assert send.attributes is not None
    assert send.attributes["messaging.rocketmq.message.type"] == "transaction"
    trace_id = format(send.context.trace_id, "032x")
    for name in ("end_transaction", "check_transaction_state"):
        assert format(mine[name].context.trace_id, "032x") == trace_id, name

    def broker_spans() -> set[tuple[str, str]] | None:
        seen = {(s.service, s.name) for s in sink.snapshot() if s.trace_id == trace_id}
        wanted = {
            ("ferry-broker-remoting", "end_transaction"),
            ("ferry-checkback", "check_transaction_state"),
            ("ferry-broker-remoting", "check_transaction_state"),
        }
        return seen if wanted <= seen else None

    wait_for(broker_spans, 15, "remoting's and the check-back's transaction spans")


# ---- restarts of the check-back -----------------------------------------------------------


def restart_checkback(cluster: Cluster, *, kill: bool) -> None:
    """Stops (or kills) the check-back and starts it again on the same endpoint, which
    remoting keeps polling."""
    old = cluster.local.get("checkback")
    endpoint = old.endpoints["endpoint"]
    args = [
        f"checkbackEndpoint={endpoint}" if a.startswith("checkbackEndpoint=") else a
        for a in list(old.proc.args)[3:]  # python -m ferry.scheduler.checkback ...
    ]
    if kill:
        old.kill()
    else:
        old.stop()
    new = start_service("checkback", args, env=cluster.env)
    cluster.local.processes[cluster.local.processes.index(old)] = new


def restart_remoting(cluster: Cluster) -> None:
    """Stops broker-remoting and starts it again on the same port."""
    old = cluster.local.get("broker-remoting")
    port = cluster.broker_addr.rsplit(":", 1)[1]
    args = [
        f"listenPort={port}" if a.startswith("listenPort=") else a
        for a in list(old.proc.args)[3:]  # python -m ferry.remoting ...
    ]
    old.stop()
    new = start_service("broker-remoting", args, env=cluster.env)
    cluster.local.processes[cluster.local.processes.index(old)] = new


def end_again(cluster: Cluster, group: str, result: SendResult, how: TransactionResolution) -> Any:
    client = RawClient(cluster.broker_addr)
    try:
        body, _ = client.call(
            EndTransactionRequest(
                producer_group=group,
                commit_log_offset=half_offset(result),
                resolution=how,
                from_transaction_check=True,
            )
        )
    finally:
        client.close()
    return body


def test_an_end_repeated_after_a_remoting_restart_changes_nothing(cluster: Cluster) -> None:
    create_topic(cluster, "TxRemotingRestart")
    listener = Listener(COMMIT, COMMIT)
    with TransactionProducer("pg-tx-rr", cluster.namesrv, listener) as producer:
        result = producer.send_in_transaction(Message("TxRemotingRestart", b"once"))
    restart_remoting(cluster)  # its memory of ended half messages is gone
    for how in (TransactionResolution.COMMIT, TransactionResolution.ROLLBACK):
        assert isinstance(end_again(cluster, "pg-tx-rr", result, how), OkReply)
    assert [r.body for r in real_records(cluster, "TxRemotingRestart")] == [b"once"]
    wait_for(lambda: ends(cluster, result) == ["COMMIT"], 30, "the op record")


def tx_status(cluster: Cluster) -> dict[str, str]:
    client = RawClient(cluster.local.get("checkback").endpoints["endpoint"])
    try:
        body, _ = client.call(TransactionCheckStatusRequest())
    finally:
        client.close()
    assert isinstance(body, TransactionCheckStatusReply)
    return dict(body.figures)


def test_checkback_restarts_neither_lose_nor_repeat_a_decision(cluster: Cluster) -> None:
    create_topic(cluster, "TxRestart")
    undecided = Listener(UNKNOWN, COMMIT)
    decided = Listener(COMMIT, COMMIT)
    with (
        TransactionProducer("pg-tx-restart", cluster.namesrv, undecided) as later,
        TransactionProducer("pg-tx-restart-2", cluster.namesrv, decided) as now,
    ):
        sent = [now.send_in_transaction(Message("TxRestart", b"before"))]
        sent.append(later.send_in_transaction(Message("TxRestart", b"checked")))
        restart_checkback(cluster, kill=True)  # a kill -9 between half and decision
        sent.append(now.send_in_transaction(Message("TxRestart", b"after")))
        wait_for(lambda: len(ends(cluster, *sent)) == 3, 30, "three commits")
        restart_checkback(cluster, kill=False)
        wait_for(
            lambda: (
                tx_status(cluster)["transactionHalfPending"] == "0"
                and int(tx_status(cluster)["transactionOpQueueOffset"]) > 0
            ),
            30,
            "the restarted checker to read the op queue",
        )
        stored = real_records(cluster, "TxRestart")
    assert sorted(r.properties[record.PROPERTY_UNIQ_KEY] for r in stored) == sorted(
        s.msg_id for s in sent
    )
    assert ends(cluster, *sent) == ["COMMIT"] * 3
    assert decided.checked == []  # decided at once: never asked
    assert [m.msg_id for m in undecided.checked][:1] == [sent[1].msg_id]


class AfterRestart(Listener):
    """UNKNOWN until `restarted` is set, then COMMIT: the commit can only come from a check
    made after the restart."""

    def __init__(self) -> None:
        super().__init__(UNKNOWN, UNKNOWN)
        self.restarted = threading.Event()

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        super().check_local_transaction(msg)
        return COMMIT if self.restarted.is_set() else UNKNOWN


def test_a_whole_broker_restart_between_half_and_check_keeps_the_transaction(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "TxBrokerRestart")
    listener = AfterRestart()
    # heartbeats every 0.5 s: the restarted remoting learns of the producer soon (RocketMQ: 30 s)
    with TransactionProducer(
        "pg-tx-br", cluster.namesrv, listener, heartbeat_interval_ms=500
    ) as producer:
        result = producer.send_in_transaction(Message("TxBrokerRestart", b"survives"))
        cluster.restart_broker()  # the whole broker group, cleanly
        listener.restarted.set()
        wait_for(lambda: ends(cluster, result) == ["COMMIT"], 60, "the check after the restart")
    stored = real_records(cluster, "TxBrokerRestart")
    assert [r.properties[record.PROPERTY_UNIQ_KEY] for r in stored] == [result.msg_id]


# ---- a commit stopped halfway: the mark, maybe the copy, no op record --------------------------


def store_put(cluster: Cluster, topic: str, queue_id: int, raw: bytes) -> None:
    client = RawClient(cluster.local.store_endpoint)
    try:
        body, _ = client.call(StorePutRequest(topic=topic, queue_id=queue_id, count=1), [raw])
    finally:
        client.close()
    assert isinstance(body, StorePutReply), body


def half_commit(cluster: Cluster, result: SendResult, *, with_copy: bool) -> None:
    """What a remoting killed in the middle of a commit leaves in the store."""
    offset = half_offset(result)
    mark = op_record(offset, TransactionResolution.COMMIT, int(time.time() * 1000), committing=True)
    store_put(cluster, TRANS_OP_HALF_TOPIC, 0, mark)
    if with_copy:
        client = RawClient(cluster.local.store_endpoint)
        try:
            body, frames = client.call(ViewMessageRequest(phys_offset=offset))
        finally:
            client.close()
        assert isinstance(body, ViewMessageReply)
        topic, queue_id, raw = committed_record(next(record.iter_records(bytes(frames[0]))))
        store_put(cluster, topic, queue_id, raw)


def test_a_commit_stopped_between_copy_and_op_record_is_neither_lost_nor_repeated(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "TxHalfway")
    listener = AfterRestart()  # UNKNOWN until set, then COMMIT
    with TransactionProducer(
        "pg-tx-halfway", cluster.namesrv, listener, heartbeat_interval_ms=500
    ) as producer:
        copied = producer.send_in_transaction(Message("TxHalfway", b"copy stored"))
        marked = producer.send_in_transaction(Message("TxHalfway", b"mark only"))
        half_commit(cluster, copied, with_copy=True)
        half_commit(cluster, marked, with_copy=False)
        # the remoting that stopped halfway is gone: the one serving now started after both
        # halves were stored, so it asks the check-back before it ends them (without the
        # restart this test leaned on an earlier test's restart being less than 5 s old)
        restart_remoting(cluster)
        wait_for(lambda: int(tx_status(cluster)["transactionCommitMarks"]) >= 2, 15, "marks read")
        listener.restarted.set()
        # an end repeated after the restart: the checker finds the copy after the mark, and
        # writes the op record remoting could not
        assert isinstance(
            end_again(cluster, "pg-tx-halfway", copied, TransactionResolution.COMMIT), OkReply
        )
        wait_for(lambda: ends(cluster, copied) == ["COMMIT"], 15, "the op record of the copy")
        # no copy after the other mark: once no copy can come any more (about 15 s), it is
        # checked as usual, and committed by the producer's answer
        wait_for(lambda: ends(cluster, marked) == ["COMMIT"], 60, "the check of the marked half")
    stored = real_records(cluster, "TxHalfway")
    assert sorted(r.properties[record.PROPERTY_UNIQ_KEY] for r in stored) == sorted(
        [copied.msg_id, marked.msg_id]
    )
    status = tx_status(cluster)
    assert int(status["transactionCopiesFound"]) >= 1
    assert int(status["transactionCopySearches"]) >= 2
