"""What the SDK spends per message on a send_async future and on a batch's SendResults, in
process and without a broker: the parts issue 23 (no private CPython internals) changed.

Per message, batches of 256 (send_async's max_count), best of 5 x 200 batches:
- make: a future per message (TopicAccumulator.add makes one);
- settle+result: the batch settled, then result() asked of every future (the usual caller);
- callback: add_done_callback on every future, then the settle that calls them;
- wait, as_completed: concurrent.futures' over a settled batch's futures;
- results (Python): outgoing.each_result_py, the fallback of native.send_results.

    uv run --frozen --all-packages python bench/send_futures.py [--runs 3]
    PYTHONPATH=/tmp/old-sdk uv run --frozen --all-packages python bench/send_futures.py
        (an older ferry/client first on the path: before and after on one machine)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import time
from collections.abc import Callable
from typing import cast

from ferry.client import async_sender, outgoing
from ferry.client.async_sender import Outcome, SendFuture, settle
from ferry.client.message import MessageQueue, SendResult, SendStatus

N = 256
BATCHES = 200


def per_message(setup: Callable[[], object], work: Callable[[object], object]) -> float:
    """Nanoseconds per message of work(setup()), the best of 5 runs of BATCHES batches."""
    best = float("inf")
    for _ in range(5):
        states = [setup() for _ in range(BATCHES)]
        started = time.perf_counter()
        for state in states:
            work(state)
        best = min(best, (time.perf_counter() - started) / BATCHES / N)
    return best * 1e9


def one_run() -> dict[str, float]:
    queue = MessageQueue("BenchTopic", "broker-a", 0)
    made = [SendResult(SendStatus.SEND_OK, f"{i:032X}", f"{i:032X}", queue, i) for i in range(N)]
    ids = [f"{i:032X}" for i in range(N)]
    phys = [i * 1100 for i in range(N)]

    def batch() -> tuple[Outcome, list[SendFuture]]:
        outcome = Outcome()
        return outcome, [SendFuture(outcome, i) for i in range(N)]

    def make(_: object) -> object:
        outcome = Outcome()
        return [SendFuture(outcome, i) for i in range(N)]

    def settle_and_read(state: object) -> object:
        outcome, futures = cast(tuple[Outcome, list[SendFuture]], state)
        settle(outcome, lambda: list(made), None)
        return [f.result() for f in futures]

    def callbacks(state: object) -> object:
        outcome, futures = cast(tuple[Outcome, list[SendFuture]], state)
        seen: list[object] = []
        for f in futures:
            f.add_done_callback(seen.append)
        settle(outcome, lambda: list(made), None)
        return seen

    def settled() -> object:
        outcome, futures = batch()
        settle(outcome, lambda: list(made), None)
        return futures

    def wait(futures: object) -> object:
        return concurrent.futures.wait(cast(list[SendFuture], futures))

    def as_completed(futures: object) -> object:
        return list(concurrent.futures.as_completed(cast(list[SendFuture], futures)))

    def results(_: object) -> object:
        return outgoing.each_result_py(ids, phys, SendStatus.SEND_OK, "7F00000100002A9F", queue, 0)

    return {
        "make": per_message(lambda: None, make),
        "settle+result": per_message(batch, settle_and_read),
        "callback": per_message(batch, callbacks),
        "wait": per_message(settled, wait),
        "as_completed": per_message(settled, as_completed),
        "results (Python)": per_message(lambda: None, results),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    print(f"send_async futures ({async_sender.__file__}), ns per message, median of {args.runs}")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(
            f"  {name:<18} {statistics.median(values):7.0f}  ({min(values):.0f}-{max(values):.0f})"
        )


if __name__ == "__main__":
    main()
