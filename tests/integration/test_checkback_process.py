"""Issue 25.4: transaction check-back is a process of its own. The scheduler no longer serves
checks; a check-back killed with -9 is restarted by the supervisor on its endpoint, with its
saved state, while sends, transactions and the scheduler go on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster, RawClient, start_cluster, wait_for

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    PullConsumer,
    TransactionProducer,
)
from ferry.protocol.codes import ResponseCode
from ferry.protocol.messages import (
    ErrorReply,
    SchedulerStatusReply,
    SchedulerStatusRequest,
    TransactionChecksRequest,
    TransactionCheckStatusReply,
    TransactionCheckStatusRequest,
)
from ferry.runtime.supervisor import RestartPolicy, Supervisor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHECKS = {
    "transactionTimeOut": "1000",
    "transactionCheckInterval": "300",
    "transactionCheckMax": "30",
}
FAST = RestartPolicy(first_wait=0.1, max_wait=1.0, max_crashes=5, window=60.0)


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[Cluster, Supervisor, list[str]]]:
    """A local cluster whose processes a Supervisor restarts (its lines collected)."""
    cluster = start_cluster(tmp_path, overrides=CHECKS)
    said: list[str] = []
    supervisor = Supervisor(cluster.local, policy=FAST, say=said.append)
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield cluster, supervisor, said
    finally:
        stop.set()
        thread.join(10)
        cluster.local.stop()


def call(endpoint: str, request: Any) -> Any:
    client = RawClient(endpoint)
    try:
        body, _ = client.call(request)
    finally:
        client.close()
    return body


class CommitAfterRestart:
    """UNKNOWN until `restarted` is set, then COMMIT: the commit can only come from a check
    the restarted check-back asked for."""

    def __init__(self) -> None:
        self.restarted = threading.Event()
        self.checks = 0

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checks += 1
        if self.restarted.is_set():
            return LocalTransactionState.COMMIT
        return LocalTransactionState.UNKNOWN


class Commits:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def bodies(namesrv: str, topic: str, want: int) -> list[bytes]:
    got: list[bytes] = []

    def polled(consumer: PullConsumer) -> bool:
        got.extend(m.body for m in consumer.poll(timeout=0.3))
        return len(got) >= want

    with PullConsumer("cg-checkback", namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET) as c:
        c.subscribe(topic)
        wait_for(lambda: polled(c), 30, f"{want} messages")
    return sorted(got)


def test_the_scheduler_no_longer_serves_checks_and_the_check_back_does(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, overrides=CHECKS)
    try:
        scheduler = cluster.local.get("scheduler").endpoints["endpoint"]
        checkback = cluster.local.get("checkback").endpoints["endpoint"]
        assert scheduler != checkback
        refused = call(scheduler, TransactionChecksRequest(max_checks=1))
        assert isinstance(refused, ErrorReply)
        assert refused.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        status = call(checkback, TransactionCheckStatusRequest())
        assert isinstance(status, TransactionCheckStatusReply)
        assert status.figures["transactionHalfPending"] == "0"
        # the scheduler's own status has no transaction keys any more
        own = call(scheduler, SchedulerStatusRequest())
        assert isinstance(own, SchedulerStatusReply)
        assert not [k for k in own.extra if k.startswith("transaction")]
    finally:
        cluster.local.stop()


def test_a_killed_check_back_comes_back_with_its_state_and_checks_what_was_pending(
    supervised: tuple[Cluster, Supervisor, list[str]],
) -> None:
    cluster, supervisor, said = supervised
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("TxCheckback", 2, 2)
    scheduler_pid = cluster.local.get("scheduler").pid
    listener = CommitAfterRestart()
    with (
        TransactionProducer("pg-cb-pending", cluster.namesrv, listener) as pending,
        TransactionProducer("pg-cb-now", cluster.namesrv, Commits()) as now,
    ):
        pending.send_in_transaction(Message("TxCheckback", b"checked"))
        wait_for(lambda: listener.checks >= 1, 30, "a first check (UNKNOWN)")
        state = cluster.dir / "broker-a" / "checkback" / "transactionCheck.json"
        wait_for(state.exists, 10, "the check-back's saved state")
        old = cluster.local.get("checkback")
        old.proc.kill()
        # while it is down (or coming back): a transaction decided at once still commits
        now.send_in_transaction(Message("TxCheckback", b"at-once"))
        wait_for(lambda: cluster.local.get("checkback").pid != old.pid, 30, "a new check-back")
        new = cluster.local.get("checkback")
        wait_for(lambda: new.announced, 30, "the new check-back's READY")
        assert new.endpoints["endpoint"] == old.endpoints["endpoint"]
        listener.restarted.set()
        assert bodies(cluster.namesrv, "TxCheckback", 2) == [b"at-once", b"checked"]
    assert any(line.startswith("checkback (pid ") and "SIGKILL" in line for line in said), said
    assert cluster.local.get("scheduler").pid == scheduler_pid  # the scheduler went on
    assert supervisor.restarts == 1
