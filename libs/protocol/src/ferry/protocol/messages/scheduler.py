"""The scheduler's requests (delay levels, timers) and the transaction check-back's."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request

# ---- the scheduler service (delay levels, timers) -------------------------------------------


class DelayLevelStatus(msgspec.Struct, frozen=True, array_like=True):
    level: int
    delay_ms: int
    offset: int  # next SCHEDULE_TOPIC_XXXX queue offset to deliver (RocketMQ's delayOffset)
    max_offset: int  # the queue's end, as last seen
    delivered: int = 0  # delivered since the scheduler started


class SchedulerStatusRequest(Request, frozen=True, tag="scheduler_status"):
    code = RequestCode.SCHEDULER_STATUS


class SchedulerStatusReply(Reply, frozen=True, tag="scheduler_status_reply"):
    levels: list[DelayLevelStatus]
    timer_queue_offset: int = 0  # next timer-topic queue offset to take into the wheel
    timer_queue_max: int = 0
    timer_pending: int = 0  # timers in the wheel, not yet delivered
    timer_read_ms: int = 0  # every timer due before this was delivered
    timer_delivered: int = 0  # since start
    skipped_duplicates: int = 0  # deliveries found done already after a restart
    # what other components of the scheduler report (e.g. transactions), name -> value
    extra: dict[str, str] = {}


class SchedulerProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A scheduler's last saved progress (RocketMQ's delayOffset.json and timer checkpoint):
    the next queue offset of each delay level, the timer queue offset taken in and the timer
    read time, and `scan_from`, a CommitLog offset at or below every delivery the snapshot
    does not cover (the restart check that keeps deliveries exactly once)."""

    levels: dict[int, int] = {}
    timer_queue_offset: int = 0
    timer_read_ms: int = 0
    scan_from: int = 0
    saved_ms: int = 0  # wall time of the save: a newer snapshot replaces an older one


class SchedulerProgressRequest(Request, frozen=True, tag="scheduler_progress"):
    """Remoting asks its scheduler for its last saved progress (for a slave's sync)."""

    code = RequestCode.SCHEDULER_PROGRESS


class SchedulerProgressReply(Reply, frozen=True, tag="scheduler_progress_reply"):
    progress: SchedulerProgress | None = None  # None: nothing saved yet


class SchedulerAdoptProgressRequest(Request, frozen=True, tag="scheduler_adopt_progress"):
    """A slave's remoting hands its (idle) scheduler the master's progress, so that the slave
    restarted as master resumes where the master's scheduler was. Refused by a scheduler
    that is not a slave's (NO_PERMISSION); answered with OkReply."""

    code = RequestCode.SCHEDULER_ADOPT_PROGRESS
    progress: SchedulerProgress


# ---- transactions (remoting and the check-back service) -------------------------------------


class TransactionCheck(msgspec.Struct, frozen=True, omit_defaults=True):
    """One half message to ask its group about (in TransactionChecksReply)."""

    producer_group: str
    commit_log_offset: int
    record_size: int  # of its stored record in the reply's payload frame
    tran_state_table_offset: int = 0
    msg_id: str = ""
    transaction_id: str = ""
    check_times: int = 0  # checks before this one
    traceparent: str = ""  # the trace of the half message's send


class TransactionChecksRequest(Request, frozen=True, tag="transaction_checks"):
    """Remoting asks the check-back service for half messages due for a check (held up to suspend_ms
    when none is due); it passes each to a live producer of the group as a
    CheckTransactionStateNotice."""

    code = RequestCode.TRANSACTION_CHECKS
    max_checks: int = 64
    suspend_ms: int = 0


class TransactionChecksReply(Reply, frozen=True, tag="transaction_checks_reply"):
    """Payload (when checks is not empty): one frame of the checks' half records, in order."""

    checks: list[TransactionCheck] = []


class TransactionStateRequest(Request, frozen=True, tag="transaction_state"):
    """Remoting asks the check-back service whether a half message has ended already (for half
    messages stored before remoting's start: an end repeated across a remoting restart
    changes nothing)."""

    code = RequestCode.TRANSACTION_STATE
    commit_log_offset: int


class TransactionStateReply(Reply, frozen=True, tag="transaction_state_reply"):
    ended: bool = False  # committed, rolled back or moved to TRANS_CHECK_MAX_TIME_TOPIC
    pending: bool = False  # read in the log and waiting for its end


class TransactionCheckStatusRequest(Request, frozen=True, tag="transaction_check_status"):
    code = RequestCode.TRANSACTION_CHECK_STATUS


class TransactionCheckStatusReply(Reply, frozen=True, tag="transaction_check_status_reply"):
    """The check-back's figures under their runtime-info names (transactionHalfPending, …)."""

    role: str = "ASYNC_MASTER"  # SLAVE: it checks nothing (the master's does)
    figures: dict[str, str] = {}


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
SchedulerRequest: TypeAlias = (
    SchedulerStatusRequest
    | SchedulerProgressRequest
    | SchedulerAdoptProgressRequest
    | TransactionChecksRequest
    | TransactionStateRequest
    | TransactionCheckStatusRequest
)

SchedulerReply: TypeAlias = (
    SchedulerStatusReply
    | SchedulerProgressReply
    | TransactionChecksReply
    | TransactionStateReply
    | TransactionCheckStatusReply
)
