"""send_async futures behave as concurrent.futures.Futures wherever one is used: the standard
library's wait() and as_completed() (which read a Future's own state), asyncio.wrap_future,
timeouts; and a batch's futures finish together when it settles."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

import pytest

from ferry.client.message import MessageQueue, SendResult, SendStatus
from ferry.client.send_future import Outcome, SendFuture, settle
from ferry.protocol.errors import FerryError


def results(n: int) -> list[SendResult]:
    queue = MessageQueue("t", "b", 0)
    return [SendResult(SendStatus.SEND_OK, f"ID{i}", f"OFF{i}", queue, i) for i in range(n)]


def test_wait_and_as_completed_see_a_batch_that_settles_while_they_wait() -> None:
    outcome = Outcome()
    futures = [SendFuture(outcome, i) for i in range(8)]
    first = concurrent.futures.wait(futures, timeout=0)
    assert len(first.not_done) == 8
    timer = threading.Timer(0.05, lambda: settle(outcome, lambda: results(8), None))
    timer.start()
    done = list(concurrent.futures.as_completed(futures, timeout=10))
    timer.join()
    assert {f.result().msg_id for f in done} == {f"ID{i}" for i in range(8)}
    waited = concurrent.futures.wait(futures, timeout=0)
    assert len(waited.done) == 8


def test_wait_on_a_failed_batch_reports_the_error() -> None:
    outcome = Outcome()
    futures = [SendFuture(outcome, i) for i in range(3)]
    settle(outcome, None, FerryError("broker gone"))
    waited = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert len(waited.done) == 3
    assert all(isinstance(f.exception(), FerryError) for f in futures)


def test_asyncio_wraps_a_send_async_future() -> None:
    outcome = Outcome()
    future = SendFuture(outcome, 1)

    async def main() -> SendResult:
        wrapped = asyncio.wrap_future(future)
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, settle, outcome, lambda: results(2), None)
        return await asyncio.wait_for(wrapped, 10)

    assert asyncio.run(main()).msg_id == "ID1"


def test_result_and_exception_time_out_while_the_batch_is_out() -> None:
    outcome = Outcome()
    future = SendFuture(outcome, 0)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(timeout=0.01)
    assert "running" in repr(future)
    settle(outcome, lambda: results(1), None)
    assert future.exception(timeout=0) is None
    assert future.done() and not future.running() and not future.cancelled()
    assert "finished" in repr(future)


def test_a_callback_that_raises_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ferry.client.producer")  # whatever ran before
    outcome = Outcome()
    futures = [SendFuture(outcome, i) for i in range(2)]
    seen: list[str] = []

    def broken(_: concurrent.futures.Future[SendResult]) -> None:
        raise RuntimeError("listener bug")

    futures[0].add_done_callback(broken)
    futures[1].add_done_callback(lambda f: seen.append(f.result().msg_id))
    settle(outcome, lambda: results(2), None)
    assert seen == ["ID1"]
    assert "callback of send_async failed" in caplog.text
