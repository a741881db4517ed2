"""A newly elected master's topic table covers every queue its store holds (controller mode).

Topic configs reach a slave through the metadata sync (slave_sync.py), every
slaveSynchronizeInterval, apart from the log that HA replicates. So a slave elected master can
hold messages its topic table hides: a topic the old master created (or gave more queues) a
moment before it died. Consumers read only queue ids below readQueueNums, so those messages,
acknowledged by every in-sync replica, would be out of reach for good. CI's failover rounds
lost two queues' messages of a 2-queue topic, most likely so: an elected slave lacking the topic
auto-created it with 4 queues, then a replica still holding the 2-queue config was elected.

On promotion, before it registers with the name servers, remoting asks its store which queues
hold entries and raises readQueueNums to cover them, or creates a topic it lacks (read and
write queues both). A known topic's write queues stay as configured: writing to fewer queues
loses nothing. The price: a read-queue shrink whose dropped queues still hold messages is undone
by a failover; what is stored stays readable.
"""

from __future__ import annotations

import logging

import msgspec

from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import is_system_topic
from ferry.remoting.topic_table import MAX_QUEUE_NUMS, TopicTable

log = logging.getLogger("ferry.remoting.held_queues")


def cover_held_queues(topics: TopicTable, held: dict[str, int]) -> list[TopicConfig]:
    """Makes `topics` offer for reading every queue `held` names (topic -> 1 + the highest
    queue id holding entries); returns the configs it created or widened. System topics are
    read by the services themselves, not through their configs, and are left alone."""
    changed: list[TopicConfig] = []
    for topic, count in sorted(held.items()):
        nums = min(count, MAX_QUEUE_NUMS)
        if is_system_topic(topic) or nums < 1:
            continue
        config = topics.get(topic)
        if config is None:
            config = TopicConfig(topic, read_queue_nums=nums, write_queue_nums=nums)
            log.warning(
                "topic %s: not in this master's table but %d queues hold messages: "
                "created with %d queues (its config had not reached this replica)",
                topic,
                nums,
                nums,
            )
        elif config.read_queue_nums < nums:
            log.warning(
                "topic %s: readQueueNums %d hid queues that hold messages: now %d "
                "(this replica's copy of its config was older than its log)",
                topic,
                config.read_queue_nums,
                nums,
            )
            config = msgspec.structs.replace(config, read_queue_nums=nums)
        else:
            continue
        topics.put(config)
        changed.append(config)
    return changed
