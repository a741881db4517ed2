"""The lite pull consumer as a member of its group: which queues it pulls (the group's
rebalance of its subscriptions, or exactly the queues assigned), the notices that move them,
committing on its own (auto_commit), and its heartbeat to the brokers. What a user calls is
the PullConsumer's (pull_consumer.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ferry.client.group_consumer import GroupConsumer
from ferry.client.heartbeats import masters_serving, send_heartbeat
from ferry.client.instance import ClientInstance
from ferry.client.message import MessageModel, MessageQueue
from ferry.client.message_selector import Expression, subscription_data
from ferry.client.rebalance import assignment
from ferry.protocol.errors import FerryError, TopicNotExistError
from ferry.protocol.messages import (
    AnyReply,
    ConsumerData,
    ConsumerIdsChangedNotice,
    HeartbeatRequest,
)

log = logging.getLogger("ferry.client.consumer")

QUICK_REBALANCE_S = 1.0  # while a subscribed topic has no route or member list yet


class PullGroupMember(GroupConsumer):
    """The group side of PullConsumer, whose constructor sets the state below."""

    message_model: MessageModel
    auto_commit: bool
    _assigned: dict[MessageQueue, Expression] | None  # set by assign()
    _quick_rebalance: bool
    _said_missing: set[str]  # subscribed topics said not to exist

    def _update_assignment(self) -> None:
        """Works out the wanted queues (rebalancing subscribed topics across the group's
        members); may fetch routes and member lists, so never runs on an I/O thread."""
        with self._rebalance_lock:
            inst, puller = self._instance, self._puller
            if inst is None or puller is None:
                return
            with self._lock:
                assigned = None if self._assigned is None else dict(self._assigned)
                subscriptions = dict(self._subscriptions)
            if assigned is not None:
                for topic in {q.topic for q in assigned}:
                    try:
                        inst.routes.get(topic)
                    except FerryError as err:
                        log.warning("no route for %s yet: %s", topic, err)
                removed = puller.assign(assigned, set())
                retry_soon = False
            else:
                self._say_missing(inst, subscriptions)
                plan = assignment(
                    inst,
                    self.group,
                    subscriptions,
                    broadcasting=self.message_model is MessageModel.BROADCASTING,
                    strategy=self.allocate,
                )
                removed = puller.assign(plan.wanted, plan.keep_topics)
                retry_soon = plan.retry_soon
        if removed and self.auto_commit:
            self._auto_commit()  # the next owner starts where this member stopped
        if retry_soon and not self._quick_rebalance:
            self._quick_rebalance = True
            inst.ticker.later(QUICK_REBALANCE_S, self._quick_update)

    def _say_missing(self, inst: ClientInstance, topics: Iterable[str]) -> None:
        """A subscribed topic no name server knows (a typo, or not created yet) is said once:
        poll() returns nothing of it, which is otherwise indistinguishable from no traffic.
        Asked only while a topic has no route and has not been said (the route fetched here
        is the one the rebalance uses)."""
        for topic in topics:
            if topic in self._said_missing or inst.routes.cached(topic) is not None:
                continue
            try:
                inst.routes.fetch(topic)
            except TopicNotExistError:
                self._said_missing.add(topic)
                log.warning(
                    "topic %s does not exist (name server %s): consumer group %s gets no "
                    "messages of it until it is created",
                    topic,
                    self.namesrv,
                    self.group,
                )
            except FerryError:
                continue  # nobody answered: the rebalance's own errors say so

    def _quick_update(self) -> None:
        self._quick_rebalance = False
        self._update_assignment()

    def _on_notice(self, _address: str, body: AnyReply) -> None:
        """The group's members changed: rebalance now (on the timer thread). An admin reset
        the group's offsets: go on from them."""
        if self._on_reset(body):
            return
        inst = self._instance
        if (
            inst is not None
            and isinstance(body, ConsumerIdsChangedNotice)
            and body.consumer_group == self.group
            and self._assigned is None
        ):
            inst.ticker.later(0, self._update_assignment)

    def _auto_commit(self) -> None:
        if self._puller is not None:
            for err in self._puller.commit():
                log.warning("auto commit of %s failed: %s", self.group, err)

    # ---- heartbeat ----

    def heartbeat(self) -> None:
        """Registers the group's subscriptions with every broker serving them."""
        inst = self._instance
        if inst is None:
            return
        body = HeartbeatRequest(client_id=inst.client_id, consumers=[self._consumer_data()])
        for addr in self._broker_addrs():
            send_heartbeat(inst, addr, body)

    def _consumer_data(self) -> ConsumerData:
        with self._lock:
            topics: dict[str, Expression] = dict(self._subscriptions)
            for queue, expression in (self._assigned or {}).items():
                topics.setdefault(queue.topic, expression)
        return ConsumerData(
            group=self.group,
            consume_type="PULL",
            message_model=self.message_model.value,
            consume_from=self.consume_from.value,
            subscriptions=[subscription_data(t, e) for t, e in sorted(topics.items())],
        )

    def _broker_addrs(self) -> set[str]:
        inst, puller = self._instance, self._puller
        if inst is None or puller is None:
            return set()
        with self._lock:
            topics = set(self._subscriptions) | puller.topics()
        return masters_serving(inst, topics)
