"""The pulling engine of both consumers: one pull in flight per assigned queue (what to pull
is the Puller's, in puller.py).

Each queue first learns where to start (the group's committed offset, else where consume_from
says: min, max or the first offset stored at a time; retry topics always from their start),
then pulls in a loop: the broker holds a pull (long polling) until messages arrive or
`suspend_ms` passes, and the reply's records go to a sink: the poll buffer of the pull consumer
or the process queues of the push consumer. The sink also says when a queue holds too much
(flow control); its pulls then pause until the sink calls resume_flow(). Replies are handled
on the connection's I/O thread and only touch state under the lock; whatever may block (route
lookups after a failure) and every back-off runs on the client's timer thread. A failing queue
backs off for a second without holding up the others.

Offsets live on the brokers (CLUSTERING), or in a LocalOffsetStore (BROADCASTING).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from ferry.client.consume_state import PulledBatch, QueueState
from ferry.client.instance import ClientInstance
from ferry.client.message import ConsumeFromWhere, MessageQueue
from ferry.client.message_selector import wire_expression
from ferry.client.offset_commit import OffsetCommitter
from ferry.client.offset_store import LocalOffsetStore
from ferry.client.transport import Result, expect
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    SECURITY_REFUSALS,
    BrokerNotExistError,
    FerryError,
    QueryNotFoundError,
    TopicNotExistError,
)
from ferry.protocol.messages import (
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    OffsetReply,
    PullMessageReply,
    PullMessageRequest,
    QueryConsumerOffsetRequest,
    SearchOffsetByTimestampRequest,
)
from ferry.protocol.names import RETRY_PREFIX

log = logging.getLogger("ferry.client.consumer")

PULL_BACKOFF_S = 1.0  # pullTimeDelayMillsWhenException
SUSPEND_GRACE_S = 10.0  # a held pull's request timeout is suspend + this
# A "no new message" reply much faster than the hold asked for means the broker does not hold
# pulls; wait a little instead of spinning.
FAST_EMPTY_S = 0.05
EMPTY_PULL_DELAY_S = 0.2

OffsetRequest = (
    QueryConsumerOffsetRequest
    | GetMinOffsetRequest
    | GetMaxOffsetRequest
    | SearchOffsetByTimestampRequest
)


@dataclass(frozen=True)
class PullConfig:
    group: str
    consume_from: ConsumeFromWhere
    batch_size: int
    suspend_ms: int
    consume_timestamp_ms: int = 0  # where TIMESTAMP starts (epoch ms)
    # each pull carries the queue's consume offset to the broker (RocketMQ's commitOffset
    # flag), so the broker's offset trails consumption by about one pull batch: what a member
    # taking the queue over in a rebalance consumes again
    piggyback_commit: bool = False


class PullSink(Protocol):
    """Where pulled records go. Every method is called with the puller's lock held."""

    def full(self, state: QueueState) -> bool:
        """True when the queue holds enough not yet consumed: its pulls pause."""
        ...

    def add(self, batch: PulledBatch) -> None:
        """A pull found records (the batch's next_begin_offset is where the next pull starts)."""
        ...

    def skip(self, state: QueueState, offset: int) -> None:
        """Nothing to deliver before `offset` (start position, no match, offset moved)."""
        ...


class PullEngine:
    """Queues' start offsets and their pull loops; the state is the Puller's (see puller.py)."""

    def __init__(
        self,
        instance: ClientInstance,
        config: PullConfig,
        sink: PullSink,
        cond: threading.Condition,
        local_offsets: LocalOffsetStore | None = None,
    ) -> None:
        self._inst = instance
        self._config = config
        self._sink = sink
        self.cond = cond
        self._local = local_offsets
        self._offsets = OffsetCommitter(instance, config.group, cond, local_offsets)
        self._states: dict[MessageQueue, QueueState] = {}
        self._revoked: list[QueueState] = []  # offsets still to commit
        self._paused: set[MessageQueue] = set()
        self._refused: set[tuple[MessageQueue, int]] = set()  # security refusals said
        self._closed = False

    # ---- starting offsets ----

    def _resolve_offset(self, state: QueueState, gen: int) -> None:
        """The group's committed offset, else where consume_from says."""
        q = state.queue
        if self._local is not None:
            offset = self._local.read(q)
            if offset is None:
                self._ask(state, gen, self._start_request(q), self._on_start_offset)
            else:
                self._begin(state, gen, offset, committed=True)
            return
        body = QueryConsumerOffsetRequest(self._config.group, q.topic, q.queue_id)
        self._ask(state, gen, body, self._on_committed_offset)

    def _start_request(self, q: MessageQueue) -> OffsetRequest:
        """Where a group without an offset starts. A retry topic holds only this group's
        failed messages: always from its start, so none is skipped."""
        config = self._config
        if config.consume_from is ConsumeFromWhere.FIRST_OFFSET or q.topic.startswith(RETRY_PREFIX):
            return GetMinOffsetRequest(topic=q.topic, queue_id=q.queue_id)
        if config.consume_from is ConsumeFromWhere.TIMESTAMP:
            return SearchOffsetByTimestampRequest(q.topic, q.queue_id, config.consume_timestamp_ms)
        return GetMaxOffsetRequest(topic=q.topic, queue_id=q.queue_id)

    def _on_committed_offset(self, state: QueueState, gen: int, future: Future[Result]) -> None:
        try:
            offset = expect(future.result(), OffsetReply).offset
        except QueryNotFoundError:
            self._ask(state, gen, self._start_request(state.queue), self._on_start_offset)
            return
        except FerryError as err:
            self._backoff(state, gen, err)
            return
        self._begin(state, gen, offset, committed=True)

    def _on_start_offset(self, state: QueueState, gen: int, future: Future[Result]) -> None:
        try:
            offset = expect(future.result(), OffsetReply).offset
        except FerryError as err:
            self._backoff(state, gen, err)
            return
        self._begin(state, gen, offset, committed=False)

    def _ask(
        self,
        state: QueueState,
        gen: int,
        body: OffsetRequest,
        then: Callable[[QueueState, int, Future[Result]], None],
    ) -> None:
        addr = self._inst.routes.addr_of(state.queue.broker_name, read=True)
        if addr is None:
            self._backoff(state, gen, BrokerNotExistError(f"no broker for {state.queue}"))
            return
        future = self._inst.connection(addr).submit(body, timeout_s=self._inst.api_timeout_s)
        future.add_done_callback(lambda f: then(state, gen, f))

    def _begin(self, state: QueueState, gen: int, offset: int, *, committed: bool) -> None:
        with self.cond:
            if state.dropped or gen != state.generation:
                return
            state.pull_offset = state.consume_offset = offset
            self._sink.skip(state, offset)
            state.committed_offset = offset if committed else -1
        if not committed:
            # A start from consume_from is committed at once: a member that takes the queue
            # over in a rebalance, or this one after a restart, resumes here instead of
            # applying consume_from again (and skipping what arrived meanwhile).
            self._offsets.commit_start(state, offset)
        self._pull(state)

    # ---- pulling ----

    def _pull(self, state: QueueState) -> None:
        config = self._config
        with self.cond:
            if self._closed or state.dropped or state.in_flight or state.pull_offset < 0:
                return
            if state.paused:
                return  # resume() pulls again
            if self._sink.full(state):
                state.flow_paused = True  # resume_flow() restarts it
                return
            gen = state.generation
            addr = self._inst.routes.addr_of(state.queue.broker_name, read=True)
            if addr is None:
                self._backoff(state, gen, BrokerNotExistError(f"no broker for {state.queue}"))
                return
            q = state.queue
            expression_type, expression = wire_expression(state.expression)
            commit = -1
            # a slave keeps commits too while its master is gone (and hands them over)
            if (
                config.piggyback_commit
                and self._local is None
                and 0 <= state.consume_offset != state.committed_offset
            ):
                commit = state.consume_offset
            body = PullMessageRequest(
                consumer_group=config.group,
                topic=q.topic,
                queue_id=q.queue_id,
                queue_offset=state.pull_offset,
                max_msgs=config.batch_size,
                suspend_ms=config.suspend_ms,
                expression=expression,
                expression_type=expression_type,
                commit_offset=commit,
            )
            state.in_flight = True
        started = time.monotonic()
        future = self._inst.connection(addr).submit(
            body, timeout_s=config.suspend_ms / 1000 + SUSPEND_GRACE_S
        )
        future.add_done_callback(lambda f: self._on_pull(state, gen, started, f, commit))

    def _on_pull(
        self, state: QueueState, gen: int, started: float, future: Future[Result], commit: int
    ) -> None:
        try:
            result = future.result()
            reply = expect(result, PullMessageReply)
        except FerryError as err:
            with self.cond:
                if state.dropped or gen != state.generation:
                    return
                state.in_flight = False
            if isinstance(err, TopicNotExistError):
                self._inst.routes.invalidate(state.queue.topic)
            self._backoff(state, gen, err)
            return
        delay = 0.0
        with self.cond:
            if commit >= 0 and state.committed_offset < commit:
                state.committed_offset = commit  # the broker took it with the pull
            if state.dropped or gen != state.generation:
                return
            state.in_flight = False
            status = reply.status
            if status == PullStatus.FOUND and reply.count > 0 and result[1]:
                state.pull_offset = reply.next_begin_offset
                self._sink.add(
                    PulledBatch(state, gen, result[1], reply.count, reply.next_begin_offset)
                )
            elif status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                state.pull_offset = reply.next_begin_offset
                self._sink.skip(state, reply.next_begin_offset)
                if status == PullStatus.NO_NEW_MSG and time.monotonic() - started < FAST_EMPTY_S:
                    delay = EMPTY_PULL_DELAY_S
            elif status == PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "%s: offset %d is illegal (queue holds %d..%d), moving to %d",
                    state.queue,
                    state.pull_offset,
                    reply.min_offset,
                    reply.max_offset,
                    reply.next_begin_offset,
                )
                state.pull_offset = reply.next_begin_offset
                self._sink.skip(state, reply.next_begin_offset)
            else:
                log.warning("%s: unknown pull status %d", state.queue, status)
                delay = PULL_BACKOFF_S
        if delay:
            self._inst.ticker.later(delay, lambda: self._pull_if(state, gen))
        else:
            self._pull(state)

    def _pull_if(self, state: QueueState, gen: int) -> None:
        if gen == state.generation:
            self._pull(state)

    def _backoff(self, state: QueueState, gen: int, err: FerryError) -> None:
        if self._closed:
            return
        if isinstance(err, SECURITY_REFUSALS) and (state.queue, err.code) not in self._refused:
            # the cluster's security refuses this consumer: said once per queue, loudly
            self._refused.add((state.queue, err.code))
            log.warning("%s: %s; retrying every %.0fs", state.queue, err, PULL_BACKOFF_S)
        else:
            log.info("%s: %s; retrying in %.0fs", state.queue, err, PULL_BACKOFF_S)
        self._inst.ticker.later(PULL_BACKOFF_S, lambda: self._recover(state, gen))

    def _recover(self, state: QueueState, gen: int) -> None:
        if self._closed or state.dropped or gen != state.generation:
            return
        try:
            self._inst.routes.get(state.queue.topic)
        except FerryError as err:
            self._backoff(state, gen, err)
            return
        if state.pull_offset < 0:
            self._resolve_offset(state, gen)
        else:
            self._pull(state)
