"""The futures of send_async: one per message, all of a batch reading one Outcome.

Every message gets a SendFuture reading its batch's Outcome (one lock, one state) through
Future's public methods; a batch is settled by one assignment under that lock, and its
SendResults are made when one is first asked for, so the I/O thread spends nothing per
message on completion.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ferry.client.message import SendResult
from ferry.protocol.errors import FerryError

log = logging.getLogger("ferry.client.producer")


class Outcome:
    """What the futures of one batch share: a lock, whether it is done, an error, and the
    results, made the first time one is asked for. Settling a batch is then one assignment
    under the lock, whatever its size, and a caller that never asks for a result never pays
    for it."""

    __slots__ = ("_make", "_results", "callbacks", "cond", "done", "error", "with_base")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.done = False
        self.error: BaseException | None = None
        self._make: Callable[[], list[SendResult]] | None = None
        self._results: list[SendResult] | None = None
        # made on first use (most batches get neither): callbacks to call when settled, and
        # the futures whose Future part was made, to finish too
        self.callbacks: list[tuple[SendFuture, Callable[[Future[SendResult]], object]]] | None
        self.callbacks = None
        self.with_base: list[SendFuture] | None = None

    def result(self, index: int) -> SendResult:
        results = self._results
        if results is None:
            make = self._make
            if make is None:  # a reader that lost a race with another first asker
                results = self._results
                assert results is not None
                return results[index]
            results = make()  # two first askers may both make them: equal lists
            self._results = results
            self._make = None  # what made them (the reply, the ids) is not needed again
        return results[index]


class SendFuture(Future[SendResult]):
    """A send_async result: a concurrent.futures.Future whose public methods read its batch's
    Outcome, so that settle() finishes every future of a batch at once.

    Future's own state (its condition, state and waiter lists) costs a Condition and a locked
    set_result per message, more than a send_async message otherwise costs in all; it is made
    only for code that reads it directly instead of through the methods, which
    concurrent.futures.wait and as_completed do: on such a read, Future.__init__ makes it and
    Future's public set_result or set_exception finish it from the outcome (at once, or when
    the batch settles). Those two then cost 3-10 µs a future (bench/send_futures.py); result()
    in order stays the fast way to read a batch. Already running: cancel() is refused, as for
    any send that may have left.
    """

    _with_base = False  # Future.__init__ has run (see __getattr__)

    def __init__(self, outcome: Outcome, index: int) -> None:  # Future.__init__: when needed
        self._outcome = outcome
        self._index = index

    def result(self, timeout: float | None = None) -> SendResult:
        outcome = self._outcome
        if not outcome.done:
            self._wait(timeout)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._outcome.done:
            self._wait(timeout)
        return self._outcome.error

    def _wait(self, timeout: float | None) -> None:
        outcome = self._outcome
        with outcome.cond:
            if not outcome.cond.wait_for(lambda: outcome.done, timeout):
                raise FutureTimeout()

    def done(self) -> bool:
        return self._outcome.done

    def running(self) -> bool:
        return not self._outcome.done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False  # it may have left already

    def set_running_or_notify_cancel(self) -> bool:
        return True  # running from the start

    def add_done_callback(self, fn: Callable[[Future[SendResult]], object]) -> None:
        outcome = self._outcome
        with outcome.cond:
            if not outcome.done:
                if outcome.callbacks is None:
                    outcome.callbacks = []
                outcome.callbacks.append((self, fn))
                return
        _call(fn, self)  # done already: now, as Future does

    def set_result(self, result: SendResult) -> None:
        raise _settled_with_batch()

    def set_exception(self, exception: BaseException | None) -> None:
        raise _settled_with_batch()

    def __repr__(self) -> str:
        outcome = self._outcome
        if not outcome.done:
            state = "running"
        elif outcome.error is not None:
            state = f"raised {type(outcome.error).__name__}"
        else:
            state = "finished"
        return f"<SendFuture at {id(self):#x} state={state}>"

    def __getattr__(self, name: str) -> Any:
        # Only attributes not found otherwise come here: Future's own, before it is made.
        if name not in _FUTURE_STATE or self._with_base:
            raise AttributeError(name)
        self._make_base()
        return object.__getattribute__(self, name)

    def _make_base(self) -> None:
        outcome = self._outcome
        with outcome.cond:
            if self._with_base:
                return
            Future.__init__(self)  # left pending: cancel() and running() are this class's
            self._with_base = True
            if not outcome.done:  # settle() finishes it
                if outcome.with_base is None:
                    outcome.with_base = []
                outcome.with_base.append(self)
                return
        _finish_base(self)


# What Future.__init__ gives an instance, read from a real Future rather than named here.
_FUTURE_STATE = frozenset(vars(Future()))


def _finish_base(future: SendFuture) -> None:
    """Future's own state of `future`, finished as its settled outcome says."""
    outcome = future._outcome
    if outcome.error is not None:
        Future.set_exception(future, outcome.error)
    else:
        Future.set_result(future, outcome.result(future._index))


def _call(fn: Callable[[Future[SendResult]], object], future: SendFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("callback of send_async failed")


def _settled_with_batch() -> AttributeError:
    # set_result() and friends: a send_async future finishes with its batch, never alone
    return AttributeError("a send_async future is settled by its batch, not set alone")


def settle(
    outcome: Outcome,
    results: Callable[[], list[SendResult]] | None,
    error: FerryError | None,
) -> None:
    """Finishes every future of an outcome: with the results `results()` makes when one is
    first asked for (in order), or all with error."""
    with outcome.cond:
        outcome._make = results
        outcome.error = error
        outcome.done = True
        with_base, callbacks = outcome.with_base, outcome.callbacks
        outcome.with_base = outcome.callbacks = None
        outcome.cond.notify_all()
    for future in with_base or ():
        _finish_base(future)
    for future, fn in callbacks or ():
        _call(fn, future)
