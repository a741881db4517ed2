"""Samples the cluster on a period for the charts: messages in and out per broker, messages
in per topic, lag per consumer group. Each series is a small ring buffer of (time ms, value);
the latest sample of each group (its topics, lag, consume TPS and clients) feeds the groups
page, and each topic's stored message count the topics page."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ferry.admin import Admin
from ferry.protocol.errors import FerryError
from ferry.protocol.names import DLQ_PREFIX, is_system_topic

log = logging.getLogger("ferry.console.sampler")

Series = collections.deque[tuple[int, float]]


@dataclass(frozen=True)
class GroupSample:
    group: str
    topics: list[str]
    lag: int
    at_ms: int
    tps: float = 0.0  # messages pulled per second, over the brokers' last minute
    clients: int = 0  # live members
    consume_type: str = ""  # PUSH / PULL, as the members say
    message_model: str = ""  # CLUSTERING / BROADCASTING


@dataclass
class _Counter:
    """A cumulative count and when it was read, to turn the next read into a rate."""

    value: int
    at_ms: int


@dataclass
class Samples:
    slots: int
    series: dict[str, Series] = field(default_factory=dict)
    groups: dict[str, GroupSample] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)  # topic -> messages stored
    rounds: int = 0
    last_error: str = ""

    def add(self, key: str, at_ms: int, value: float) -> None:
        ring = self.series.get(key)
        if ring is None:
            ring = self.series[key] = collections.deque(maxlen=self.slots)
        ring.append((at_ms, value))


class Sampler:
    def __init__(
        self,
        admin: Admin,
        *,
        interval_s: float,
        slots: int,
        max_topics: int,
        max_groups: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._admin = admin
        self._interval_s = interval_s
        self._max_topics = max_topics
        self._max_groups = max_groups
        self._clock = clock
        self._lock = threading.Lock()
        self._samples = Samples(slots)
        self._counters: dict[str, _Counter] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    # ---- readers (any thread) ----

    def series(self, key: str) -> list[tuple[int, float]]:
        with self._lock:
            return list(self._samples.series.get(key, ()))

    def latest(self, key: str) -> float | None:
        with self._lock:
            ring = self._samples.series.get(key)
            return ring[-1][1] if ring else None

    def groups(self) -> list[GroupSample]:
        with self._lock:
            return sorted(self._samples.groups.values(), key=lambda g: g.group)

    def topic_totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._samples.totals)

    def status(self) -> tuple[int, str]:
        with self._lock:
            return self._samples.rounds, self._samples.last_error

    # ---- the loop ----

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample_once()
            except FerryError as exc:
                with self._lock:
                    self._samples.last_error = str(exc)
                log.info("sampling failed: %s", exc)
            except Exception:
                log.exception("sampling failed")
            self._stop.wait(max(0.05, self._interval_s - (time.monotonic() - started)))

    def sample_once(self) -> None:
        now = int(self._clock() * 1000)
        group_tps = self._sample_brokers(now)
        topics = [
            t
            for t in sorted(self._admin.topic_list())
            if not is_system_topic(t) and not t.startswith(DLQ_PREFIX)
        ][: self._max_topics]
        max_offsets: dict[str, dict[tuple[str, int], int]] = {}
        group_topics: dict[str, list[str]] = {}
        totals: dict[str, int] = {}
        for topic in topics:
            try:
                stats = self._admin.topic_stats(topic)
                groups = self._admin.consumer_groups(topic)
            except FerryError as exc:
                log.debug("topic %s not sampled: %s", topic, exc)
                continue
            offsets = {(b, q.queue_id): q.max_offset for b, qs in stats.items() for q in qs}
            totals[topic] = sum(q.max_offset - q.min_offset for qs in stats.values() for q in qs)
            max_offsets[topic] = offsets
            self._rate(f"topic-in:{topic}", sum(offsets.values()), now)
            for group in groups:
                group_topics.setdefault(group, []).append(topic)
        sampled: dict[str, GroupSample] = {}
        for group in sorted(group_topics)[: self._max_groups]:
            try:
                lag = sum(self._lag(group, t, max_offsets[t]) for t in group_topics[group])
            except FerryError as exc:
                log.debug("group %s not sampled: %s", group, exc)
                continue
            sampled[group] = self._group_sample(
                group, group_topics[group], lag, now, group_tps.get(group, 0.0)
            )
            with self._lock:
                self._samples.add(f"group-lag:{group}", now, lag)
        with self._lock:
            self._samples.groups = sampled
            self._samples.totals = totals
            self._samples.rounds += 1
            self._samples.last_error = ""

    def _sample_brokers(self, now: int) -> dict[str, float]:
        """Each broker's message rates; returns each group's consume TPS over the brokers."""
        info = self._admin.cluster_info()
        group_tps: dict[str, float] = {}
        for data in info.brokers.values():
            for addr in data.broker_addrs.values():
                try:
                    runtime = self._admin.broker_runtime_info(addr)
                    traffic = self._admin.broker_stats(addr)
                except FerryError as exc:
                    log.debug("broker %s not sampled: %s", addr, exc)
                    continue
                self._rate(f"broker-in:{addr}", int(runtime.get("putMessageTotal", "0")), now)
                self._rate(f"broker-out:{addr}", int(runtime.get("getMessageTotal", "0")), now)
                for row in traffic.get:
                    group_tps[row.group] = group_tps.get(row.group, 0.0) + row.tps
        return group_tps

    def _group_sample(
        self, group: str, topics: list[str], lag: int, now: int, tps: float
    ) -> GroupSample:
        """The group's live members (union over the brokers) and how they consume."""
        members: set[str] = set()
        consume_type = message_model = ""
        try:
            for reply in self._admin.consumer_connections(group).values():
                members.update(c.client_id for c in reply.connections)
                consume_type = consume_type or reply.consume_type
                message_model = message_model or reply.message_model
        except FerryError as exc:
            log.debug("members of %s not sampled: %s", group, exc)
        return GroupSample(
            group, topics, lag, now, round(tps, 2), len(members), consume_type, message_model
        )

    def _lag(self, group: str, topic: str, max_offsets: dict[tuple[str, int], int]) -> int:
        lag = 0
        for queue in self._admin.queues(topic):
            committed = self._admin.consumer_offset(group, queue)
            top = max_offsets.get((queue.broker_name, queue.queue_id))
            if committed is not None and top is not None:
                lag += max(0, top - committed)
        return lag

    def _rate(self, key: str, total: int, now: int) -> None:
        """Adds (total - previous total) / seconds since to the series `key`."""
        before = self._counters.get(key)
        self._counters[key] = _Counter(total, now)
        if before is None or now <= before.at_ms:
            return
        rate = max(0, total - before.value) / ((now - before.at_ms) / 1000)
        with self._lock:
            self._samples.add(key, now, round(rate, 2))
