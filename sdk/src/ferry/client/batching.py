"""send_async's automatic batching as plain state (RocketMQ 5's autoBatch: count, bytes,
linger): the messages of a topic waiting to leave, and the one request a batch becomes.

A full batch (max_count messages, or max_bytes) leaves as soon as the window of batches in
flight allows; a partial one when nothing of its topic is in flight, or once its first message
has waited `linger_s` (see async_sender for who asks, and when).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from ferry.client.message import PlainMessage
from ferry.client.message_encode import encode_plain_batch
from ferry.client.msg_id import MessageIdGenerator
from ferry.client.outgoing import Outgoing
from ferry.client.send_future import Outcome, SendFuture


@dataclass(frozen=True)
class BatchConfig:
    enabled: bool = True
    max_count: int = 256
    max_bytes: int = 512 * 1024
    max_batches_in_flight: int = 4  # per topic
    linger_s: float = 0.005


# A message waiting in a batch: encoded already (Outgoing), or a plain message encoded with
# the rest of its batch when the batch leaves.
Item = Outgoing | PlainMessage


@dataclass(eq=False)
class Batch:
    started: float  # monotonic time of its first message
    items: list[Item] = field(default_factory=list)
    size: int = 0
    outcome: Outcome = field(default_factory=Outcome)  # what its futures read


@dataclass(eq=False)
class TopicAccumulator:
    """Messages of one topic waiting to go out; plain state, guarded by the sender's lock."""

    config: BatchConfig
    waiting: Batch | None = None
    sealed: collections.deque[Batch] = field(default_factory=collections.deque)
    in_flight: int = 0

    def add(self, item: Item, size: int, now: float | None = None) -> SendFuture:
        """Queues a message of `size` bytes encoded; its future shares the lock of the batch
        it joins. `now` (monotonic, read when None) starts a new batch's linger."""
        config = self.config
        batch = self.waiting
        if batch is not None and batch.size + size > config.max_bytes:
            self.seal()  # a batch never grows past max_bytes (kept under maxMessageSize)
            batch = None
        if batch is None:
            batch = self.waiting = Batch(time.monotonic() if now is None else now)
        future = SendFuture(batch.outcome, len(batch.items))  # its index among the results
        batch.items.append(item)
        batch.size += size
        if len(batch.items) >= config.max_count or batch.size >= config.max_bytes:
            self.seal()
        return future

    def seal(self) -> None:
        if self.waiting is not None:
            self.sealed.append(self.waiting)
            self.waiting = None

    def ready(self, now: float, window: int, flush: bool = False) -> list[Batch]:
        """Batches to send now (counted as in flight): full ones while the window allows; the
        partial one when nothing is in flight, its linger is over, or on flush."""
        out: list[Batch] = []
        while self.in_flight < window:
            if self.sealed:
                batch = self.sealed.popleft()
            elif self.waiting is not None and (
                flush or self.in_flight == 0 or now - self.waiting.started >= self.config.linger_s
            ):
                batch, self.waiting = self.waiting, None
            else:
                break
            self.in_flight += 1
            out.append(batch)
        return out


def build_batch(
    topic: str,
    items: list[Item],
    msg_ids: MessageIdGenerator,
    born_host: bytes,
    compress_over: int,
) -> Outgoing:
    """One request of a batch: plain messages encoded (ids made) now, in runs."""
    if len(items) == 1 and isinstance(items[0], Outgoing):
        return items[0]
    ids: list[str] = []
    payloads: list[bytes] = []
    run: list[PlainMessage] = []
    born = int(time.time() * 1000)

    def encode_run() -> None:
        run_ids = msg_ids.next_ids(len(run))
        payloads.append(
            encode_plain_batch(
                topic,
                run,
                run_ids,
                born_timestamp=born,
                born_host=born_host,
                compress_over=compress_over,
            )
        )
        ids.extend(run_ids)
        run.clear()

    for item in items:
        if isinstance(item, PlainMessage):
            run.append(item)
            continue
        if run:
            encode_run()
        ids.extend(item.msg_ids)
        payloads.append(item.payload)
    if run:
        encode_run()
    first = items[0]
    if isinstance(first, PlainMessage):
        return Outgoing(topic, ids, b"".join(payloads), len(ids), "", "", None, True)
    parent, state = first.traceparent, first.tracestate  # the envelope carries the first's
    return Outgoing(topic, ids, b"".join(payloads), len(ids), parent, state, None, True)
