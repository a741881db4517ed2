"""What the push consumer's two consume services share: the sink the puller feeds (decoding,
flow control), the consume thread pool, calling the listener, and handing failed messages back
to the broker (CONSUMER_SEND_MSG_BACK)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace

from ferry.client.consume_state import PulledBatch, QueueState
from ferry.client.instance import ClientInstance
from ferry.client.message import ConsumeResult, MessageExt, MessageModel
from ferry.client.message_decode import decode_records
from ferry.client.process_queue import ProcessQueue
from ferry.protocol import record
from ferry.protocol.errors import BrokerNotExistError, FerryError
from ferry.protocol.messages import ConsumerSendMsgBackRequest
from ferry.protocol.names import RETRY_PREFIX

if TYPE_CHECKING:
    from ferry.client.puller import Puller

log = logging.getLogger("ferry.client.consumer")

Listener = Callable[[list[MessageExt]], ConsumeResult]
MiB = 1024 * 1024


@dataclass(frozen=True)
class ConsumeConfig:
    group: str
    model: MessageModel
    max_reconsume_times: int  # -1: unlimited (orderly) or 16 (concurrent), as RocketMQ
    thread_nums: int = 20
    batch_max_size: int = 1  # consumeMessageBatchMaxSize
    threshold_count: int = 1000  # pullThresholdForQueue
    threshold_bytes: int = 100 * MiB  # pullThresholdSizeForQueue
    max_span: int = 2000  # consumeConcurrentlyMaxSpan
    consume_timeout_s: float = 15 * 60.0
    suspend_s: float = 1.0  # suspendCurrentQueueTimeMillis
    retry_later_s: float = 5.0  # a failed send-back is consumed again locally after this
    lock_max_live_s: float = 30.0  # an orderly queue is consumed only this long after a lock

    @property
    def clustering(self) -> bool:
        return self.model is MessageModel.CLUSTERING


def restore_retry_topic(msg: MessageExt) -> MessageExt:
    """A message from %RETRY%group shows its original topic (its queue stays the retry one)."""
    if msg.topic.startswith(RETRY_PREFIX):
        original = msg.properties.get(record.PROPERTY_RETRY_TOPIC)
        if original:
            msg.topic = original
    return msg


class ConsumeService:
    """Base of the concurrent and orderly services; the puller's sink."""

    orderly = False

    def __init__(
        self,
        inst: ClientInstance,
        config: ConsumeConfig,
        listener: Listener,
        cond: threading.Condition,
    ) -> None:
        self.inst = inst
        self.config = config
        self.listener = listener
        self.cond = cond
        self.puller: Puller | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=config.thread_nums, thread_name_prefix=f"ferry-consume-{config.group}"
        )
        self._active = 0  # tasks submitted and not finished
        self._idle = threading.Condition()
        self.closing = False
        self._setup()

    def _setup(self) -> None:
        """What a kind of service adds to the common state (the constructor's last step)."""

    def bind(self, puller: Puller) -> None:
        self.puller = puller

    # ---- the puller's sink (called with the lock held) ----

    @staticmethod
    def process(state: QueueState) -> ProcessQueue:
        if state.process is None:
            state.process = ProcessQueue()
        return state.process

    def full(self, state: QueueState) -> bool:
        pq = self.process(state)
        config = self.config
        if pq.count >= config.threshold_count or pq.size_bytes >= config.threshold_bytes:
            return True
        return not self.orderly and pq.span() > config.max_span

    def add(self, batch: PulledBatch) -> None:
        state = batch.state
        pq = self.process(state)
        msgs = self.decode(batch)
        pq.add(msgs, batch.next_begin_offset)
        state.consume_offset = pq.commit_offset()
        if msgs:
            self.dispatch(state, msgs)

    def skip(self, state: QueueState, offset: int) -> None:
        pq = self.process(state)
        pq.skip_to(offset)
        state.consume_offset = pq.commit_offset()

    def decode(self, batch: PulledBatch) -> list[MessageExt]:
        state = batch.state
        broker = state.queue.broker_name
        tags = state.tags
        out: list[MessageExt] = []
        for frame in batch.frames:
            decoded: list[MessageExt] = []
            try:
                decode_records(frame, broker, tags, decoded)
            except ValueError as err:  # RecordError: bytes we cannot read; skipped, logged
                log.error("%s: undecodable records skipped: %s", state.queue, err)
            out.extend([restore_retry_topic(msg) for msg in decoded])
        return out

    def dispatch(self, state: QueueState, msgs: list[MessageExt]) -> None:
        raise NotImplementedError

    # ---- running tasks ----

    def submit(self, fn: Callable[[], None]) -> bool:
        """Runs fn on the consume pool; False once the service is shutting down."""
        with self._idle:
            if self.closing:
                return False
            self._active += 1
        try:
            future = self._pool.submit(self._run, fn)
        except RuntimeError:  # the pool is shut down
            self._finished()
            return False
        # runs when the task ends, or when shutdown() cancels it before it started
        future.add_done_callback(lambda _f: self._finished())
        return True

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("consume task of %s failed", self.config.group)

    def _finished(self) -> None:
        with self._idle:
            self._active -= 1
            if self._active <= 0:
                self._idle.notify_all()

    def shutdown(self, timeout_s: float) -> bool:
        """Drops tasks not started, waits up to timeout_s for running ones; True if idle."""
        with self._idle:
            self.closing = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._active > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._idle.wait(remaining)
            idle = self._active <= 0
        if idle:
            self._pool.shutdown(wait=True)
        else:
            log.warning(
                "%s: listeners still running after %.1f s; not waiting for them",
                self.config.group,
                timeout_s,
            )
        return idle

    def call_listener(self, msgs: list[MessageExt], failure: ConsumeResult) -> ConsumeResult:
        """The listener's verdict; `failure` when it raises or answers something else."""
        tracing = self.inst.tracing
        span = tracing.start_process(self.config.group, msgs, self.config.model.value)
        try:
            if span is None:
                result: object = self.listener(msgs)
            else:  # the listener's own spans are children of `process`
                with trace.use_span(span, end_on_exit=False):
                    result = self.listener(msgs)
        except Exception as exc:
            log.exception("listener of %s failed on %d message(s)", self.config.group, len(msgs))
            tracing.end(span, exc)
            return failure
        if not isinstance(result, ConsumeResult):  # user code: not to be trusted
            log.error("listener of %s returned %r, not a ConsumeResult", self.config.group, result)
            result = failure
        if span is not None:
            span.set_attribute("messaging.rocketmq.consume_result", result.value)
        tracing.end(span, error_type="" if result is ConsumeResult.SUCCESS else result.value)
        return result

    @staticmethod
    def gone(state: QueueState) -> bool:
        """The queue moved to another member (or the consumer stopped): results are dropped,
        the next owner consumes these messages again."""
        return state.dropped

    def resume_flow(self, state: QueueState) -> None:
        if self.puller is not None:
            self.puller.resume_flow(state)

    # ---- handing messages back ----

    def send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Gives a failed message back to its broker, which stores it in %RETRY%group (or
        %DLQ%group: delay_level < 0, or out of reconsume times); False when that failed."""
        inst = self.inst
        addr = inst.routes.addr_of(msg.broker_name)
        body = ConsumerSendMsgBackRequest(
            consumer_group=self.config.group,
            phys_offset=msg.commitlog_offset,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            delay_level=delay_level,
            max_reconsume_times=self.max_reconsume_times(),
        )
        try:
            if addr is None:
                raise BrokerNotExistError(f"no master address for broker {msg.broker_name}")
            inst.connection(addr).request(body, timeout_s=inst.api_timeout_s)
        except FerryError as err:
            log.warning("send back of %s (%s) failed: %s", msg.msg_id, msg.topic, err)
            return False
        return True

    def max_reconsume_times(self) -> int:
        limit = self.config.max_reconsume_times
        if limit >= 0:
            return limit
        return 2**31 - 1 if self.orderly else 16
