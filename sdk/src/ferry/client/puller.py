"""The Puller of both consumers: which queues are pulled (assign), pausing and resuming them,
flow control, committing, resetting and seeking. The pulling itself, and where each queue
starts, is the engine's (pull_engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from ferry.client.consume_state import QueueState, commit_entries, parse_tags
from ferry.client.message import MessageQueue
from ferry.client.message_selector import Expression
from ferry.client.pull_engine import PullEngine
from ferry.protocol.errors import FerryError, InvalidParameterError


class Puller(PullEngine):
    # ---- assignment ----

    def queues(self) -> list[MessageQueue]:
        with self.cond:
            return sorted(self._states)

    def topics(self) -> set[str]:
        with self.cond:
            return {q.topic for q in self._states}

    def states(self) -> list[QueueState]:
        with self.cond:
            return list(self._states.values())

    def state(self, queue: MessageQueue) -> QueueState | None:
        with self.cond:
            return self._states.get(queue)

    def assign(
        self, wanted: Mapping[MessageQueue, Expression], keep_topics: set[str]
    ) -> list[QueueState]:
        """Pulls exactly the `wanted` queues (with their expressions); queues of
        `keep_topics` stay even if not wanted (their route is unknown for now). Returns the
        states dropped (their offsets are committed by the next commit())."""
        added: list[QueueState] = []
        removed: list[QueueState] = []
        with self.cond:
            for queue, state in list(self._states.items()):
                if queue not in wanted and queue.topic not in keep_topics:
                    state.dropped = True
                    del self._states[queue]
                    self._revoked.append(state)
                    removed.append(state)
            for queue, expression in wanted.items():
                current = self._states.get(queue)
                if current is None:
                    fresh = QueueState.create(queue, expression)
                    fresh.paused = queue in self._paused
                    self._states[queue] = fresh
                    added.append(fresh)
                elif current.expression != expression:
                    current.expression, current.tags = expression, parse_tags(expression)
        for state in added:
            self._resolve_offset(state, state.generation)
        return removed

    def pause(self, queues: list[MessageQueue]) -> None:
        """No more pulls for these queues until resume(); kept across reassignments."""
        with self.cond:
            self._paused.update(queues)
            for queue in queues:
                state = self._states.get(queue)
                if state is not None:
                    state.paused = True

    def resume(self, queues: list[MessageQueue]) -> None:
        with self.cond:
            self._paused.difference_update(queues)
            states = [self._states[q] for q in queues if q in self._states]
            for state in states:
                state.paused = False
            self.cond.notify_all()
        for state in states:
            self._pull(state)

    def paused(self) -> list[MessageQueue]:
        with self.cond:
            return sorted(self._paused)

    def stop(self) -> None:
        """No more pulls; states stay for a last commit()."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self._closed = True
            for state in self._states.values():
                state.dropped = True
            self._states.clear()
            self.cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- flow control, committing, seeking ----

    def resume_flow(self, state: QueueState) -> None:
        """The sink consumed some of a queue: pull again if flow control had paused it."""
        with self.cond:
            if not state.flow_paused or self._sink.full(state):
                return
            state.flow_paused = False
        self._pull(state)

    def commit(self) -> list[FerryError]:
        """Sends the consume offsets that moved (one request per broker); the errors."""
        with self.cond:
            by_broker = commit_entries([*self._states.values(), *self._revoked])
            self._revoked.clear()
        errors, failed = self._offsets.commit(by_broker)
        with self.cond:  # revoked queues are not retried by anything else
            self._revoked.extend(s for s, _ in failed if s.dropped)
        return errors

    def reset_offsets(self, offsets: Mapping[MessageQueue, int]) -> int:
        """An admin reset the group's offsets (resetOffsetByTime; the broker holds them
        already): the queues held here start over from them. What was pulled or is being
        consumed for the old positions no longer counts and is not committed. Returns how
        many queues moved."""
        moved: list[tuple[QueueState, int]] = []
        with self.cond:
            for queue, offset in offsets.items():
                old = self._states.get(queue)
                if old is None or offset < 0:
                    continue
                old.dropped = True
                fresh = QueueState.create(queue, old.expression)
                fresh.paused = old.paused
                self._states[queue] = fresh
                moved.append((fresh, offset))
            self._revoked = [s for s in self._revoked if s.queue not in offsets]
            self.cond.notify_all()
        for state, offset in moved:
            if self._local is not None:
                self._local.update(state.queue, offset)
            self._begin(state, state.generation, offset, committed=True)
        return len(moved)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        if offset < 0:
            raise InvalidParameterError("offset must be >= 0")
        with self.cond:
            state = self._states.get(queue)
            if state is None:
                raise InvalidParameterError(f"{queue} is not assigned to this consumer")
            state.restart_at(offset)
        self._pull(state)
