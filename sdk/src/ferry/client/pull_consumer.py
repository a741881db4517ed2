"""The lite pull consumer (RocketMQ's DefaultLitePullConsumer): subscribe (queues shared with
the group's other members by rebalancing) or assign (exactly the queues given), poll, commit
(automatic by default), seek, pause and resume. Pulling itself is in puller.py, the consumer's
part in its group (rebalance, heartbeat) in pull_member.py; this is the user-facing side: what
to consume, handing messages over, and offsets.

BROADCASTING consumers read every queue and keep their offsets in a local file (see
offset_store.py); CLUSTERING ones keep them on the brokers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from opentelemetry import trace

from ferry.client.consume_state import PollSink, decode_batch
from ferry.client.instance import ClientInstance, not_started
from ferry.client.message import ConsumeFromWhere, MessageExt, MessageModel, MessageQueue
from ferry.client.message_selector import Expression, as_selector
from ferry.client.pull_engine import OffsetRequest
from ferry.client.pull_member import PullGroupMember
from ferry.client.puller import Puller
from ferry.client.transport import expect
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import BrokerNotExistError, InvalidParameterError, QueryNotFoundError
from ferry.protocol.messages import (
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    OffsetReply,
    QueryConsumerOffsetRequest,
)
from ferry.protocol.names import check_topic

log = logging.getLogger("ferry.client.consumer")


class PullConsumer(PullGroupMember):
    """poll() is for one thread at a time; commit, seek and the rest may be called from any
    thread. With auto_commit, offsets are committed every auto_commit_interval_ms and at
    shutdown; otherwise call commit()."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        pull_batch_size: int = 32,
        suspend_ms: int = 20_000,
        pull_threshold_for_queue: int = 1000,
        max_poll_messages: int = 1000,
        max_reconsume_times: int = 16,
        allocate: str = "averagely",
        heartbeat_interval_ms: int = 30_000,
        poll_namesrv_interval_ms: int = 30_000,
        rebalance_interval_ms: int = 20_000,
        consume_timestamp_ms: int | None = None,
        instance_name: str = "DEFAULT",
        offset_store_dir: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        """consume_from applies only to a group with no offset for a queue; TIMESTAMP starts at
        consume_timestamp_ms (default: 30 minutes before start()). BROADCASTING consumers keep
        offsets in offset_store_dir (default ~/.ferry_offsets) under
        `<ip>@<instance_name>/<group>`: give each one on a host its own instance_name."""
        super().__init__(
            group,
            namesrv,
            consume_from,
            allocate,
            pull_batch_size=pull_batch_size,
            suspend_ms=suspend_ms,
            consume_timestamp_ms=consume_timestamp_ms,
            instance_name=instance_name,
            offset_store_dir=offset_store_dir,
            tracer_provider=tracer_provider,
            credentials=credentials,
            tls_server_key=tls_server_key,
        )
        if pull_batch_size <= 0 or max_poll_messages <= 0 or suspend_ms < 0:
            raise InvalidParameterError("pull_batch_size, max_poll_messages, suspend_ms")
        self.message_model = message_model
        self.auto_commit = auto_commit
        self.max_poll_messages = max_poll_messages
        self.max_reconsume_times = max_reconsume_times
        self._threshold = pull_threshold_for_queue
        self._intervals = {
            "commit": auto_commit_interval_ms / 1000,
            "heartbeat": heartbeat_interval_ms / 1000,
            "namesrv": poll_namesrv_interval_ms / 1000,
            "rebalance": rebalance_interval_ms / 1000,
        }
        self._assigned: dict[MessageQueue, Expression] | None = None  # set by assign()
        # set_sub_expression_for_assign: the expression of an assigned topic's queues
        self._assign_expressions: dict[str, Expression] = {}
        self._sink: PollSink | None = None
        self._yield_first = False  # the last poll() returned messages
        self._quick_rebalance = False
        self._said_missing: set[str] = set()  # subscribed topics said not to exist

    @property
    def _model(self) -> MessageModel:
        return self.message_model

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        inst = self._new_instance()
        try:
            self._check_sql(inst)
        except BaseException:
            inst.close()
            raise
        cond = threading.Condition(threading.RLock())
        self._sink = PollSink(cond, self._threshold)
        self._puller = self._new_puller(inst, self._sink, cond)
        self._instance = inst
        inst.on_notice(self._on_notice)
        inst.routes.on_new_master(self._heartbeat_to)  # a new broker learns of us at once
        self._update_assignment()
        self.heartbeat()
        ticker = inst.ticker
        ticker.every(self._intervals["namesrv"], inst.routes.refresh_all)
        ticker.every(self._intervals["heartbeat"], self.heartbeat)
        ticker.every(self._intervals["rebalance"], self._update_assignment)
        if self.auto_commit:
            ticker.every(self._intervals["commit"], self._auto_commit)

    def shutdown(self) -> None:
        """Commits (with auto_commit), leaves the group and closes the connections."""
        inst, puller = self._instance, self._puller
        if inst is None or puller is None:
            return
        if self.auto_commit:
            self._auto_commit()
        self._leave(inst, self._broker_addrs())
        with self._rebalance_lock:
            self._instance = None
        puller.close()
        inst.close()

    def _started(self) -> tuple[ClientInstance, Puller]:
        inst, puller = self._instance, self._puller
        if inst is None or puller is None:
            raise not_started(f"consumer {self.group}")
        return inst, puller

    # ---- what to consume ----

    def subscribe(self, topic: str, expression: Expression = "*") -> None:
        """Consume every read queue of `topic` whose messages match the tag expression
        ("*", "TagA", "TagA || TagB"), or that a MessageSelector selects (by_sql: the
        brokers need enablePropertyFilter=true; a broker that refuses the filter makes
        this, or start(), raise)."""
        with self._lock:
            if self._assigned is not None:
                raise InvalidParameterError("subscribe() and assign() cannot be mixed")
        self._subscribe(topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalancing): every message, or what
        set_sub_expression_for_assign chose for their topic."""
        wanted = list(queues)
        for queue in wanted:
            check_topic(queue.topic)
        with self._lock:
            if self._subscriptions:
                raise InvalidParameterError("subscribe() and assign() cannot be mixed")
            chosen = self._assign_expressions
            self._assigned = {q: chosen.get(q.topic, "*") for q in wanted}
        self._changed()

    def set_sub_expression_for_assign(self, topic: str, expression: Expression) -> None:
        """The tags or SQL92 filter (MessageSelector) that assigned queues of `topic` are
        read with, as RocketMQ's setSubExpressionForAssign; "*" until set. Applies to the
        queues assigned now and later; a broker with enablePropertyFilter=false refuses an
        SQL92 one on its pulls."""
        check_topic(topic)
        selector = as_selector(expression)
        kept: Expression = selector if selector.is_sql else selector.expression
        with self._lock:
            self._assign_expressions[topic] = kept
            if self._assigned is not None:
                for queue in self._assigned:
                    if queue.topic == topic:
                        self._assigned[queue] = kept
        self._changed()

    def _changed(self) -> None:
        """After start, a new subscription takes effect at once and brokers hear of it."""
        if self._instance is not None:
            self._update_assignment()
            self.heartbeat()

    def assignment(self) -> list[MessageQueue]:
        """The queues being consumed now."""
        return [] if self._puller is None else self._puller.queues()

    # ---- poll, commit, seek ----

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """Messages pulled so far, waiting up to `timeout` seconds for the first ones."""
        inst, puller = self._started()
        sink = self._sink
        assert sink is not None
        if self._yield_first:
            # The I/O thread reads replies and sends the next pulls only with the GIL; a
            # caller polling in a tight loop would otherwise keep it for whole switch
            # intervals while those pulls wait. Yielding here rather than before the last
            # poll() returned keeps the wait for the GIL back off the delivered messages.
            self._yield_first = False
            time.sleep(0)
        start_ns = time.time_ns()
        batches, resume = sink.take(timeout, self.max_poll_messages, lambda: puller.closed)
        for state in resume:
            puller.resume_flow(state)
        msgs: list[MessageExt] = []
        for batch in batches:
            try:
                msgs.extend(decode_batch(batch))
            except ValueError as err:  # RecordError: bytes we cannot read; skipped, logged
                log.error("%s: undecodable records skipped: %s", batch.state.queue, err)
        inst.tracing.record_receive(self.group, msgs, start_ns, self.message_model.value)
        self._yield_first = bool(batches)
        return msgs

    def commit(self) -> None:
        """Commits the offsets after what poll() returned (one request per broker)."""
        _, puller = self._started()
        errors = puller.commit()
        if errors:
            raise errors[0]

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """No more messages of these queues from poll() until resume(); what is buffered for
        them waits. Pauses last across rebalances."""
        self._started()[1].pause(list(queues))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._started()[1].resume(list(queues))

    def paused(self) -> list[MessageQueue]:
        return [] if self._puller is None else self._puller.paused()

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """The next poll() returns messages of `queue` from `offset` on; buffered and in-flight
        messages of the queue are dropped. The new position is committed with the next commit."""
        self._started()[1].seek(queue, offset)

    def seek_to_beginning(self, queue: MessageQueue) -> None:
        self.seek(queue, self._offset_of(queue, GetMinOffsetRequest(queue.topic, queue.queue_id)))

    def seek_to_end(self, queue: MessageQueue) -> None:
        self.seek(queue, self._offset_of(queue, GetMaxOffsetRequest(queue.topic, queue.queue_id)))

    def committed(self, queue: MessageQueue) -> int | None:
        """The group's offset for `queue` on the broker; None when it has none."""
        body = QueryConsumerOffsetRequest(self.group, queue.topic, queue.queue_id)
        try:
            return self._offset_of(queue, body)
        except QueryNotFoundError:
            return None

    def _offset_of(self, queue: MessageQueue, body: OffsetRequest) -> int:
        inst, _ = self._started()
        inst.routes.get(queue.topic)
        addr = inst.routes.addr_of(queue.broker_name, read=True)
        if addr is None:
            raise BrokerNotExistError(f"no address for broker {queue.broker_name}")
        result = inst.connection(addr).request(body, timeout_s=inst.api_timeout_s)
        return expect(result, OffsetReply).offset
