"""Committed consumer offsets (RocketMQ's ConsumerOffsetManager), kept in
config/consumerOffset.json.

Commits arrive with every pull and every few seconds from each client, so they only change
memory; the file is rewritten on a period (flushConsumerOffsetInterval) when something changed,
and on stop. A crash loses at most one period of commits: consumers then see a few messages
again, which at-least-once delivery allows. RocketMQ's file shape is kept:
{"offsetTable": {"topic@group": {"queueId": offset}}} ('@' is not allowed in names).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ferry.remoting.state_file import load_json, save_json

FILE_NAME = "consumerOffset.json"
KEY_SEP = "@"


class _OffsetFile(msgspec.Struct, rename="camel", kw_only=True):
    offset_table: dict[str, dict[int, int]] = {}


class ConsumerOffsetTable:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / FILE_NAME
        # (topic, group) -> queue id -> next offset to consume
        self._offsets: dict[tuple[str, str], dict[int, int]] = {}
        self.dirty = False
        # a slave's commits since its last sync with the master, (group, topic, queue id) ->
        # offset: handed to the master so that they outlive the master's outage (slave_sync.py)
        self.journal: dict[tuple[str, str, int], int] | None = None

    def load(self) -> None:
        state = load_json(self.path, _OffsetFile)
        if state is None:
            return
        for key, queues in state.offset_table.items():
            topic, sep, group = key.partition(KEY_SEP)
            if sep and topic and group:
                self._offsets[(topic, group)] = dict(queues)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.journal is not None:
            self.journal[(group, topic, queue_id)] = offset
        self.put_synced(group, topic, queue_id, offset)

    def put_synced(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Sets an offset without journaling it (what a slave copies from its master)."""
        queues = self._offsets.get((topic, group))
        if queues is None:
            queues = self._offsets[(topic, group)] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self._offsets.get((topic, group))
        return None if queues is None else queues.get(queue_id)

    def queues(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get((topic, group), {}))

    def entries(self) -> list[tuple[str, str, int, int]]:
        """Every (group, topic, queue id, offset)."""
        return [
            (group, topic, queue_id, offset)
            for (topic, group), queues in self._offsets.items()
            for queue_id, offset in queues.items()
        ]

    def groups(self) -> set[str]:
        return {group for _, group in self._offsets}

    def remove(self, *, topic: str | None = None, group: str | None = None) -> int:
        """Drops the offsets of a topic (deleteTopic) or of a group (deleteSubGroup);
        returns how many (topic, group) pairs went."""
        gone = [
            key
            for key in self._offsets
            if (topic is None or key[0] == topic) and (group is None or key[1] == group)
        ]
        for key in gone:
            del self._offsets[key]
        if gone:
            self.dirty = True
        return len(gone)

    def persist(self) -> None:
        table = {
            f"{topic}{KEY_SEP}{group}": dict(sorted(queues.items()))
            for (topic, group), queues in sorted(self._offsets.items())
        }
        save_json(self.path, _OffsetFile(offset_table=table))
        self.dirty = False

    def persist_if_dirty(self) -> bool:
        if not self.dirty:
            return False
        self.persist()
        return True
