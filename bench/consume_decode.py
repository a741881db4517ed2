"""Where a consumer's time goes: the records' decoding into messages, in a real consume and
on the same frames again, with the messages dropped at once or held as a consumer holds them.

    uv run --frozen --all-packages python bench/consume_decode.py [--runs 3] [--messages 200000]

A local cluster (ASYNC_FLUSH); per round a topic of 4 queues gets `messages` 1 KB messages
(send_batch of 256 from 4 threads), then bench/client_throughput.py's consume reads them
(PullConsumer, pulls of 512) with the SDK's decode_batch timed around every call. Then four
of the pulled batches are decoded again 50 times each: once dropping each batch's messages
at once (memory reused while in cache, as bench/native_loops.py measures), once holding the
last 8 batches' messages (new memory for each batch's bodies, as a consumer's loop does).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import client_throughput
from common import Figure, report

from ferry.admin import Admin
from ferry.client import MessageExt, pull_consumer
from ferry.client.consume_state import PulledBatch, decode_batch
from ferry.runtime.launcher import start_local_cluster

KEPT = 4  # batches decoded again
HELD = 8  # batches whose messages stay alive in the held case


def redecode(batches: list[PulledBatch], held: int) -> float:
    """µs per message over 50 passes; the messages of the last `held` batches stay alive."""
    hold: list[list[MessageExt]] = []
    n = 0
    started = time.perf_counter()
    for _ in range(50):
        for batch in batches:
            out = decode_batch(batch)
            n += len(out)
            if held:
                hold.append(out)
                del hold[:-held]
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    spent = [0.0, 0]
    kept: list[PulledBatch] = []

    def timed_decode(batch: PulledBatch) -> list[MessageExt]:
        started = time.perf_counter()
        out = decode_batch(batch)
        spent[0] += time.perf_counter() - started
        spent[1] += len(out)
        if len(kept) < KEPT:
            kept.append(batch)
        return out

    wrapped: Callable[[PulledBatch], list[MessageExt]] = timed_decode
    pull_consumer.decode_batch = wrapped  # type: ignore[assignment]  # the consumer's own call
    rate, whole, in_situ, dropped, held = [], [], [], [], []
    with (
        tempfile.TemporaryDirectory(prefix="ferry-consume-decode-") as data,
        start_local_cluster(data, overrides={"flushDiskType": "ASYNC_FLUSH"}) as cluster,
    ):
        namesrv = cluster.namesrv_addr
        for run in range(args.runs):
            topic = f"ConsumeDecode{run}"
            with Admin(namesrv) as admin:
                admin.create_topic(topic, 4, 4)
            _, stored = client_throughput.produce_batches(namesrv, topic, args.messages, 256, 4)
            spent[:] = [0.0, 0]
            kept.clear()
            rate.append(client_throughput.consume(namesrv, topic, f"cg-{topic}", stored))
            whole.append(1e6 / rate[-1])
            in_situ.append(spent[0] / spent[1] * 1e6)
            dropped.append(redecode(kept, 0))
            held.append(redecode(kept, HELD))
    report(
        "Consume: the decoding's share",
        [
            Figure("consume (PullConsumer, pulls of 512)", "msg/s", rate),
            Figure("consume, wall time per message", "µs/msg", whole),
            Figure("decode_batch during the consume", "µs/msg", in_situ),
            Figure("the same frames again, messages dropped", "µs/msg", dropped),
            Figure(f"the same frames again, {HELD} batches held", "µs/msg", held),
        ],
    )


if __name__ == "__main__":
    main()
