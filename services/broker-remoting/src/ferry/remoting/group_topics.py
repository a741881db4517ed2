"""A consumer group's own topics: %RETRY%<group> (failed messages waiting for another try;
created when a clustering member first heartbeats, as RocketMQ does, so that members can
subscribe to it) and %DLQ%<group> (messages out of retries; created on first use). One queue
each, readable and writable; the name servers learn of them with the next registration."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferry.protocol.codes import Perm
from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import check_topic, dlq_topic, retry_topic
from ferry.remoting.topic_table import TopicTable

log = logging.getLogger("ferry.remoting.group_topics")

GROUP_TOPIC_QUEUES = 1  # retryQueueNums; the DLQ has one queue too


class GroupTopics:
    def __init__(self, topics: TopicTable, on_topics_changed: Callable[[], None]) -> None:
        self._topics = topics
        self._on_topics_changed = on_topics_changed

    def retry(self, group: str) -> TopicConfig:
        return self._ensure(retry_topic(group))

    def dlq(self, group: str) -> TopicConfig:
        return self._ensure(dlq_topic(group))

    def _ensure(self, name: str) -> TopicConfig:
        """The topic's config, created now if missing; InvalidParameterError when the group's
        name makes the topic name too long."""
        config = self._topics.get(name)
        if config is not None:
            return config
        check_topic(name)
        config = TopicConfig(
            name,
            read_queue_nums=GROUP_TOPIC_QUEUES,
            write_queue_nums=GROUP_TOPIC_QUEUES,
            perm=Perm.READ_WRITE,
        )
        self._topics.put(config)
        log.info("created %s", name)
        self._on_topics_changed()
        return config
