"""The push consumer (RocketMQ's DefaultMQPushConsumer): long-polling pulls feed a listener.

    with PushConsumer("my-group", "127.0.0.1:9876") as consumer:  # started on entry
        ...

Usually: consumer = PushConsumer(group, namesrv); consumer.subscribe(topic, "TagA || TagB");
consumer.register_listener(fn); consumer.start(). The group's members share the queues of its
topics (CLUSTERING: each queue has one owner, offsets on the brokers, failed messages retried
through %RETRY%group, which members subscribe to by themselves) or each read everything
(BROADCASTING: offsets in a local file, no retries). Members rebalance every
`rebalance_interval_ms` and at once when a broker says the group changed. Consumption itself
is in consume_concurrently.py and consume_orderly.py; pulling in puller.py.
"""

from __future__ import annotations

import logging
import threading

from opentelemetry import trace

from ferry.client.consume_concurrently import ConcurrentConsumeService
from ferry.client.consume_orderly import OrderlyConsumeService
from ferry.client.consume_service import ConsumeConfig, ConsumeService, Listener, MiB
from ferry.client.group_consumer import GroupConsumer
from ferry.client.heartbeats import masters_serving
from ferry.client.instance import ClientInstance, not_started
from ferry.client.message import ConsumeFromWhere, MessageModel, MessageQueue
from ferry.client.message_selector import Expression, subscription_data
from ferry.client.orderly_rebalance import move_orderly, renew_locks
from ferry.client.puller import Puller
from ferry.client.rebalance import assignment, unlock_queues
from ferry.client.work_loops import CHECK_INTERVAL_S
from ferry.protocol.auth import Credentials
from ferry.protocol.errors import IllegalStateError, InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    ConsumerData,
    ConsumerIdsChangedNotice,
)
from ferry.protocol.names import retry_topic

log = logging.getLogger("ferry.client.consumer")

QUICK_REBALANCE_S = 1.0  # after a rebalance that could not finish (no route, lock held)


class PushConsumer(GroupConsumer):
    """Thread-safe. The listener runs on the consume threads (`consume_thread_nums`)."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        *,
        consume_timestamp_ms: int | None = None,
        allocate: str = "averagely",
        max_reconsume_times: int = 16,
        consume_thread_nums: int = 20,
        pull_batch_size: int = 32,
        consume_batch_max_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        consume_timeout_ms: int = 15 * 60_000,
        suspend_current_queue_time_ms: int = 1000,
        retry_later_ms: int = 5000,
        suspend_ms: int = 20_000,
        rebalance_interval_ms: int = 20_000,
        heartbeat_interval_ms: int = 30_000,
        poll_namesrv_interval_ms: int = 30_000,
        persist_offset_interval_ms: int = 5000,
        lock_renew_interval_ms: int = 20_000,
        lock_max_live_ms: int = 30_000,
        await_termination_ms: int = 5000,
        instance_name: str = "DEFAULT",
        offset_store_dir: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        credentials: Credentials | None = None,
        tls_server_key: str | None = None,
    ) -> None:
        """consume_from applies only to a group with no offset for a queue; TIMESTAMP starts
        at consume_timestamp_ms (default: 30 minutes before start()). max_reconsume_times -1
        means 16 (concurrent) or unlimited (orderly). BROADCASTING members keep offsets in
        offset_store_dir (default ~/.ferry_offsets) under `<ip>@<instance_name>/<group>`:
        give each member on one host its own instance_name."""
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
        positive = {
            "consume_thread_nums": consume_thread_nums,
            "pull_batch_size": pull_batch_size,
            "consume_batch_max_size": consume_batch_max_size,
            "pull_threshold_for_queue": pull_threshold_for_queue,
            "pull_threshold_size_for_queue_mib": pull_threshold_size_for_queue_mib,
            "consume_concurrently_max_span": consume_concurrently_max_span,
            "consume_timeout_ms": consume_timeout_ms,
            "rebalance_interval_ms": rebalance_interval_ms,
            "lock_renew_interval_ms": lock_renew_interval_ms,
            "lock_max_live_ms": lock_max_live_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidParameterError(f"{name} must be positive, not {value}")
        if max_reconsume_times < -1 or suspend_ms < 0:
            raise InvalidParameterError("max_reconsume_times must be >= -1, suspend_ms >= 0")
        self.model = model
        self._consume = ConsumeConfig(
            group=group,
            model=model,
            max_reconsume_times=max_reconsume_times,
            thread_nums=consume_thread_nums,
            batch_max_size=consume_batch_max_size,
            threshold_count=pull_threshold_for_queue,
            threshold_bytes=pull_threshold_size_for_queue_mib * MiB,
            max_span=consume_concurrently_max_span,
            consume_timeout_s=consume_timeout_ms / 1000,
            suspend_s=suspend_current_queue_time_ms / 1000,
            retry_later_s=retry_later_ms / 1000,
            lock_max_live_s=lock_max_live_ms / 1000,
        )
        self._intervals = {
            "rebalance": rebalance_interval_ms / 1000,
            "heartbeat": heartbeat_interval_ms / 1000,
            "namesrv": poll_namesrv_interval_ms / 1000,
            "persist": persist_offset_interval_ms / 1000,
            "lock": lock_renew_interval_ms / 1000,
        }
        self._await_s = await_termination_ms / 1000
        self._listener: Listener | None = None
        self._orderly = False
        self._service: ConsumeService | None = None
        self._rebalance_pending = False

    @property
    def _model(self) -> MessageModel:
        return self.model

    # ---- configuration ----

    def subscribe(self, topic: str, expression: Expression = "*") -> None:
        """Consume `topic`'s messages whose tag matches ("*", "TagA", "TagA || TagB"), or
        that a MessageSelector selects (by_sql: the brokers need enablePropertyFilter=true;
        a broker that refuses the filter makes this, or start(), raise)."""
        self._subscribe(topic, expression)

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """listener(msgs) -> ConsumeResult. Concurrent: SUCCESS or RECONSUME_LATER; orderly:
        SUCCESS or SUSPEND. An exception counts as a failure. Set before start()."""
        if self._instance is not None:
            raise IllegalStateError("register_listener() must come before start()")
        self._listener = listener
        self._orderly = orderly

    @property
    def orderly(self) -> bool:
        return self._orderly

    # ---- lifecycle ----

    def start(self) -> None:
        if self._instance is not None:
            return
        if self._listener is None:
            raise IllegalStateError("register a listener before start()")
        inst = self._new_instance()
        try:
            self._check_sql(inst)
        except BaseException:
            inst.close()
            raise
        cond = threading.Condition(threading.RLock())
        service_cls = OrderlyConsumeService if self._orderly else ConcurrentConsumeService
        service = service_cls(inst, self._consume, self._listener, cond)
        puller = self._new_puller(inst, service, cond, piggyback_commit=True)
        service.bind(puller)
        self._instance, self._puller, self._service = inst, puller, service
        inst.on_notice(self._on_notice)
        inst.routes.on_new_master(self._heartbeat_to)  # a new broker learns of us at once
        self.rebalance()
        ticker = inst.ticker
        ticker.every(self._intervals["namesrv"], inst.routes.refresh_all)
        ticker.every(self._intervals["heartbeat"], self.heartbeat)
        ticker.every(self._intervals["rebalance"], self.rebalance)
        ticker.every(self._intervals["persist"], self._persist)
        if isinstance(service, OrderlyConsumeService):
            if self.model is MessageModel.CLUSTERING:
                ticker.every(self._intervals["lock"], self._renew_locks)
        elif isinstance(service, ConcurrentConsumeService):
            scan = min(self._consume.consume_timeout_s, 60.0)
            ticker.every(scan, service.clean_expired)
            ticker.every(CHECK_INTERVAL_S, service.check_stalled)

    def shutdown(self) -> None:
        """Stops pulling, waits (up to await_termination_ms) for running listeners, commits,
        releases orderly locks and leaves the group."""
        inst, puller, service = self._instance, self._puller, self._service
        if inst is None or puller is None or service is None:
            return
        inst.ticker.close()  # no more rebalances, commits or renewals behind our back
        with self._rebalance_lock:
            self._instance = None
        puller.stop()
        service.shutdown(self._await_s)
        for err in puller.commit():
            log.warning("last commit of %s failed: %s", self.group, err)
        if self._orderly and self.model is MessageModel.CLUSTERING:
            unlock_queues(inst, self.group, puller.queues())
        self._leave(inst, self._broker_addrs(inst))
        puller.close()
        inst.close()

    @property
    def client_id(self) -> str:
        inst = self._instance
        if inst is None:
            raise not_started(f"consumer {self.group}")
        return inst.client_id

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now (its retry queues included)."""
        return [] if self._puller is None else self._puller.queues()

    # ---- rebalancing ----

    def _all_subscriptions(self) -> dict[str, Expression]:
        with self._lock:
            subs = dict(self._subscriptions)
        if self.model is MessageModel.CLUSTERING and subs:
            subs.setdefault(retry_topic(self.group), "*")
        return subs

    def _changed(self) -> None:
        if self._instance is not None:
            self.heartbeat()
            self.rebalance_soon()

    def rebalance_soon(self) -> None:
        inst = self._instance
        if inst is None or self._rebalance_pending:
            return
        self._rebalance_pending = True
        inst.ticker.later(0, self.rebalance)

    def _on_notice(self, _address: str, body: AnyReply) -> None:
        if self._on_reset(body):
            return
        if isinstance(body, ConsumerIdsChangedNotice) and body.consumer_group == self.group:
            log.debug("%s: members changed; rebalancing", self.group)
            self.rebalance_soon()

    def rebalance(self) -> None:
        """Works out this member's queues and moves to them (may block: never on I/O threads)."""
        with self._rebalance_lock:
            self._rebalance_pending = False
            inst, puller, service = self._instance, self._puller, self._service
            if inst is None or puller is None or service is None:
                return
            plan = assignment(
                inst,
                self.group,
                self._all_subscriptions(),
                broadcasting=self.model is MessageModel.BROADCASTING,
                strategy=self.allocate,
            )
            retry_soon = plan.retry_soon
            if isinstance(service, OrderlyConsumeService) and service.config.clustering:
                retry_soon |= move_orderly(
                    inst,
                    self.group,
                    puller,
                    service,
                    plan.wanted,
                    plan.keep_topics,
                    lambda: self._commit(puller),
                )
            elif puller.assign(plan.wanted, plan.keep_topics):
                self._commit(puller)  # the next owner starts where this one stopped
        if retry_soon:
            inst.ticker.later(QUICK_REBALANCE_S, self.rebalance_soon)

    def _renew_locks(self) -> None:
        inst, puller, service = self._instance, self._puller, self._service
        if inst is not None and puller is not None and isinstance(service, OrderlyConsumeService):
            renew_locks(inst, self.group, puller, service)

    # ---- offsets ----

    def _persist(self) -> None:
        if self._puller is not None:
            self._commit(self._puller)

    def _commit(self, puller: Puller) -> None:
        for err in puller.commit():
            log.warning("offset commit of %s failed: %s", self.group, err)

    # ---- heartbeat ----

    def heartbeat(self) -> None:
        """Registers the group's subscriptions with every broker serving them."""
        inst = self._instance
        if inst is not None:
            for addr in self._broker_addrs(inst):
                self._heartbeat_to(addr)

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group=self.group,
            consume_type="PUSH",
            message_model=self.model.value,
            consume_from=self.consume_from.value,
            subscriptions=[
                subscription_data(t, e) for t, e in sorted(self._all_subscriptions().items())
            ],
        )

    def _broker_addrs(self, inst: ClientInstance) -> set[str]:
        return masters_serving(inst, self._all_subscriptions())
