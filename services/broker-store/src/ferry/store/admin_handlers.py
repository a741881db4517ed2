"""The store's share of mqadmin: deleteTopic drops a topic's ConsumeQueues, cleanExpiredCQ
drops ConsumeQueue data below the CommitLog's min offset, updateBrokerConfig changes the
retention keys live. The CommitLog itself is never touched here: a deleted topic's records
stay until retention deletes their segments."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from ferry.protocol.errors import ConfigError, InvalidParameterError
from ferry.protocol.messages import (
    CleanExpiredConsumeQueueRequest,
    OkReply,
    QueuesCleanedReply,
    StoreDeleteTopicRequest,
    StoreUpdateConfigRequest,
)
from ferry.protocol.names import check_topic
from ferry.runtime.config import BrokerConfig
from ferry.runtime.service import Call
from ferry.store.retention import RetentionPolicy
from ferry.store.store import MessageStore

log = logging.getLogger("ferry.store.admin")

# broker.conf keys the store takes while running (the rest need a restart)
LIVE_KEYS = frozenset(
    {"fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio", "diskSpaceWarningLevelRatio"}
)


class StoreAdminHandlers:
    """`quiesce()` waits until no file is in the flush worker's hands (before files are
    deleted); `config` is the one in force, which update_config changes."""

    def __init__(
        self, store: MessageStore, quiesce: Callable[[], None], config: BrokerConfig
    ) -> None:
        self._store = store
        self._quiesce = quiesce
        self._config = config

    def delete_topic(self, req: StoreDeleteTopicRequest, _call: Call) -> QueuesCleanedReply:
        check_topic(req.topic)
        queues = self._store.queues
        ids = sorted(qid for topic, qid in queues.queues if topic == req.topic)
        if not ids:
            return QueuesCleanedReply(queues=0, files=0)
        self._quiesce()  # no flush may hold a file being deleted
        files = sum(queues.remove(req.topic, qid) for qid in ids)
        log.info("topic %s: %d ConsumeQueue(s), %d file(s) deleted", req.topic, len(ids), files)
        return QueuesCleanedReply(queues=len(ids), files=files)

    def clean_expired(
        self, _req: CleanExpiredConsumeQueueRequest, _call: Call
    ) -> QueuesCleanedReply:
        """As RocketMQ's cleanExpiredConsumerQueue: a queue whose last entry points below the
        CommitLog's min offset holds nothing readable and goes whole; others lose the entries
        and files below it."""
        store = self._store
        log_min = store.log.min_offset
        self._quiesce()
        removed = files = entries = 0
        for (topic, qid), cq in list(store.queues.queues.items()):
            last = cq.last_entry()
            if last is None or last[0] < log_min:  # nothing readable left in it
                files += store.queues.remove(topic, qid)
                removed += 1
                continue
            before = len(cq.files)
            entries += cq.drop_below(log_min)
            files += before - len(cq.files)
        if removed or files or entries:
            log.info(
                "cleanExpiredCQ: %d queue(s) removed, %d file(s) deleted, %d entries dropped "
                "(CommitLog starts at %d)",
                removed,
                files,
                entries,
                log_min,
            )
        return QueuesCleanedReply(queues=removed, files=files, entries=entries)

    def update_config(self, req: StoreUpdateConfigRequest, _call: Call) -> OkReply:
        wrong = sorted(set(req.properties) - LIVE_KEYS)
        if wrong:
            raise InvalidParameterError(f"the store cannot change {', '.join(wrong)} live")
        values = msgspec.to_builtins(self._config)
        values.update(req.properties)
        try:
            config = msgspec.convert(values, BrokerConfig, strict=False)
            config.check()
            policy = RetentionPolicy.from_config(config)
        except (msgspec.ValidationError, ConfigError) as exc:
            raise InvalidParameterError(f"bad value: {exc}") from None
        self._config = config
        self._store.retention.policy = policy
        self._store.retention.check_disk()  # a new warning level applies to the next put
        log.info(
            "config changed live: %s", ", ".join(f"{k}={v}" for k, v in req.properties.items())
        )
        return OkReply()
