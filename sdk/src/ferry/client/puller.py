"""The pulling engine of the pull consumer: one pull in flight per assigned queue.

Each queue first learns where to start (the group's committed offset, else its min or max
offset), then pulls in a loop: the broker holds a pull (long polling) until messages arrive or
`suspend_ms` passes, and the reply's records wait in a buffer for poll(). Replies are handled
on the connection's I/O thread and only touch state under the lock; whatever may block (route
lookups after a failure) and every back-off runs on the client's timer thread. A failing queue
backs off for a second without holding up the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from ferry.client.consume_state import (
    PullBuffer,
    PulledBatch,
    QueueState,
    commit_entries,
    offset_entries,
    parse_tags,
)
from ferry.client.instance import ClientInstance
from ferry.client.message import ConsumeFromWhere, MessageQueue
from ferry.client.transport import Result, expect, wait
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import (
    BrokerNotExistError,
    FerryError,
    InvalidParameterError,
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
    UpdateConsumerOffsetRequest,
)

log = logging.getLogger("ferry.client.consumer")

PULL_BACKOFF_S = 1.0  # pullTimeDelayMillsWhenException
SUSPEND_GRACE_S = 10.0  # a held pull's request timeout is suspend + this
# A "no new message" reply much faster than the hold asked for means the broker does not hold
# pulls; wait a little instead of spinning.
FAST_EMPTY_S = 0.05
EMPTY_PULL_DELAY_S = 0.2

OffsetRequest = QueryConsumerOffsetRequest | GetMinOffsetRequest | GetMaxOffsetRequest


@dataclass(frozen=True)
class PullConfig:
    group: str
    consume_from: ConsumeFromWhere
    batch_size: int
    suspend_ms: int
    threshold_per_queue: int  # buffered messages of a queue before its pulls pause


class Puller:
    def __init__(self, instance: ClientInstance, config: PullConfig) -> None:
        self._inst = instance
        self._config = config
        self.cond = threading.Condition(threading.RLock())
        self._states: dict[MessageQueue, QueueState] = {}
        self._revoked: list[QueueState] = []  # offsets still to commit
        self._buffer = PullBuffer()
        self._closed = False

    # ---- assignment ----

    def queues(self) -> list[MessageQueue]:
        with self.cond:
            return sorted(self._states)

    def topics(self) -> set[str]:
        with self.cond:
            return {q.topic for q in self._states}

    def assign(self, wanted: dict[MessageQueue, str], keep_topics: set[str]) -> None:
        """Pulls exactly the `wanted` queues (with their tag expressions); queues of
        `keep_topics` stay even if not wanted (their route is unknown for now)."""
        added: list[QueueState] = []
        with self.cond:
            for queue, state in list(self._states.items()):
                if queue not in wanted and queue.topic not in keep_topics:
                    state.dropped = True
                    del self._states[queue]
                    self._revoked.append(state)
            for queue, expression in wanted.items():
                current = self._states.get(queue)
                if current is None:
                    fresh = QueueState.create(queue, expression)
                    self._states[queue] = fresh
                    added.append(fresh)
                elif current.expression != expression:
                    current.expression, current.tags = expression, parse_tags(expression)
        for state in added:
            self._resolve_offset(state, state.generation)

    def close(self) -> None:
        with self.cond:
            self._closed = True
            for state in self._states.values():
                state.dropped = True
            self._states.clear()
            self._buffer.batches.clear()
            self.cond.notify_all()

    # ---- starting offsets ----

    def _resolve_offset(self, state: QueueState, gen: int) -> None:
        """The group's committed offset, else where consume_from says."""
        q = state.queue
        body = QueryConsumerOffsetRequest(self._config.group, q.topic, q.queue_id)
        self._ask(state, gen, body, self._on_committed_offset)

    def _on_committed_offset(self, state: QueueState, gen: int, future: Future[Result]) -> None:
        try:
            offset = expect(future.result(), OffsetReply).offset
        except QueryNotFoundError:
            q = state.queue
            body: OffsetRequest
            if self._config.consume_from is ConsumeFromWhere.FIRST_OFFSET:
                body = GetMinOffsetRequest(topic=q.topic, queue_id=q.queue_id)
            else:
                body = GetMaxOffsetRequest(topic=q.topic, queue_id=q.queue_id)
            self._ask(state, gen, body, self._on_start_offset)
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
        addr = self._inst.routes.addr_of(state.queue.broker_name)
        if addr is None:
            self._backoff(state, gen, BrokerNotExistError(f"no master for {state.queue}"))
            return
        future = self._inst.connection(addr).submit(body, timeout_s=self._inst.api_timeout_s)
        future.add_done_callback(lambda f: then(state, gen, f))

    def _begin(self, state: QueueState, gen: int, offset: int, *, committed: bool) -> None:
        with self.cond:
            if state.dropped or gen != state.generation:
                return
            state.pull_offset = state.consume_offset = offset
            # A start from consume_from is committed too, so that a restart resumes here.
            state.committed_offset = offset if committed else -1
        self._pull(state)

    # ---- pulling ----

    def _pull(self, state: QueueState) -> None:
        config = self._config
        with self.cond:
            if self._closed or state.dropped or state.in_flight or state.pull_offset < 0:
                return
            if state.buffered >= config.threshold_per_queue:
                state.flow_paused = True  # take() restarts it
                return
            gen = state.generation
            addr = self._inst.routes.addr_of(state.queue.broker_name, read=True)
            if addr is None:
                self._backoff(state, gen, BrokerNotExistError(f"no broker for {state.queue}"))
                return
            q = state.queue
            body = PullMessageRequest(
                consumer_group=config.group,
                topic=q.topic,
                queue_id=q.queue_id,
                queue_offset=state.pull_offset,
                max_msgs=config.batch_size,
                suspend_ms=config.suspend_ms,
                expression=state.expression,
            )
            state.in_flight = True
        started = time.monotonic()
        future = self._inst.connection(addr).submit(
            body, timeout_s=config.suspend_ms / 1000 + SUSPEND_GRACE_S
        )
        future.add_done_callback(lambda f: self._on_pull(state, gen, started, f))

    def _on_pull(self, state: QueueState, gen: int, started: float, future: Future[Result]) -> None:
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
            if state.dropped or gen != state.generation:
                return
            state.in_flight = False
            status = reply.status
            if status == PullStatus.FOUND and reply.count > 0 and result[1]:
                self._buffer.add(
                    PulledBatch(state, gen, result[1], reply.count, reply.next_begin_offset)
                )
                state.pull_offset = reply.next_begin_offset
                self.cond.notify_all()
            elif status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                state.skip_to(reply.next_begin_offset)
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
                state.skip_to(reply.next_begin_offset)
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

    # ---- handing over, committing, seeking ----

    def take(self, timeout: float, max_messages: int) -> list[PulledBatch]:
        """Waits up to `timeout` s for pulled batches and hands them over: their messages
        count as consumed from now on."""
        deadline = time.monotonic() + max(0.0, timeout)
        resume: list[QueueState] = []
        with self.cond:
            while not self._buffer.ready():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return []
                self.cond.wait(remaining)
            batches = self._buffer.take(max_messages)
            for batch in batches:
                state = batch.state
                # All pulled data handed over: what was skipped after it counts as consumed.
                state.consume_offset = (
                    state.pull_offset if state.batches == 0 else batch.next_begin_offset
                )
                if state.flow_paused and state.buffered < self._config.threshold_per_queue:
                    state.flow_paused = False
                    resume.append(state)
        for state in resume:
            self._pull(state)
        return batches

    def commit(self) -> list[FerryError]:
        """Sends the consume offsets that moved (one request per broker); the errors."""
        inst = self._inst
        with self.cond:
            by_broker = commit_entries([*self._states.values(), *self._revoked])
            self._revoked.clear()
        errors: list[FerryError] = []
        sent: list[tuple[Future[Result], list[tuple[QueueState, int]]]] = []
        for broker, entries in by_broker.items():
            addr = inst.routes.addr_of(broker)
            if addr is None:
                errors.append(BrokerNotExistError(f"no master address for broker {broker}"))
                continue
            body = UpdateConsumerOffsetRequest(
                consumer_group=self._config.group, entries=offset_entries(entries)
            )
            sent.append((inst.connection(addr).submit(body, timeout_s=inst.api_timeout_s), entries))
        for future, entries in sent:
            try:
                wait(future, inst.api_timeout_s)
            except FerryError as err:
                errors.append(err)
                with self.cond:  # revoked queues are not retried by anything else
                    self._revoked.extend(s for s, _ in entries if s.dropped)
                continue
            with self.cond:
                for state, offset in entries:
                    state.committed_offset = offset
        return errors

    def seek(self, queue: MessageQueue, offset: int) -> None:
        if offset < 0:
            raise InvalidParameterError("offset must be >= 0")
        with self.cond:
            state = self._states.get(queue)
            if state is None:
                raise InvalidParameterError(f"{queue} is not assigned to this consumer")
            state.restart_at(offset)
        self._pull(state)
