"""The broker's topic configs (RocketMQ's TopicConfigManager), kept in config/topics.json.

Every change is written at once (topics change rarely, and a topic the broker forgets after a
crash would orphan its messages). The file keeps RocketMQ's outer shape
({"topicConfigTable": {...}, "dataVersion": {...}}) so people who know RocketMQ find their way.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from ferry.protocol.codes import Perm
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import TopicConfig
from ferry.protocol.names import AUTO_CREATE_TOPIC_KEY, check_topic
from ferry.remoting.state_file import load_json, save_json

FILE_NAME = "topics.json"
MAX_QUEUE_NUMS = 1024
ADMIN_PERMS = (Perm.WRITE, Perm.READ, Perm.READ_WRITE)


class DataVersion(msgspec.Struct, kw_only=True):
    timestamp: int = 0
    counter: int = 0


class _TopicFile(msgspec.Struct, rename="camel", kw_only=True):
    topic_config_table: dict[str, TopicConfig] = {}
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)


def check_topic_config(config: TopicConfig) -> None:
    """What an admin may set: a valid name, 1..1024 queues each way, perm W, R or RW."""
    check_topic(config.topic_name)
    for what, nums in (
        ("readQueueNums", config.read_queue_nums),
        ("writeQueueNums", config.write_queue_nums),
    ):
        if not 1 <= nums <= MAX_QUEUE_NUMS:
            raise InvalidParameterError(f"{what} must be within 1..{MAX_QUEUE_NUMS}, not {nums}")
    if config.perm not in ADMIN_PERMS:
        raise InvalidParameterError(f"perm must be 2 (W), 4 (R) or 6 (RW), not {config.perm}")


class TopicTable:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / FILE_NAME
        self._topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()

    def load(self) -> None:
        state = load_json(self.path, _TopicFile)
        if state is not None:
            self._topics = dict(state.topic_config_table)
            self.data_version = state.data_version

    def persist(self) -> None:
        # every field written out (TopicConfig omits defaults on the wire): the file is read
        # by people too
        table = {name: msgspec.structs.asdict(c) for name, c in sorted(self._topics.items())}
        save_json(self.path, {"topicConfigTable": table, "dataVersion": self.data_version})

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self._topics

    def __len__(self) -> int:
        return len(self._topics)

    def all(self) -> list[TopicConfig]:
        return [self._topics[name] for name in sorted(self._topics)]

    def snapshot(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def put(self, config: TopicConfig) -> bool:
        """Creates or replaces a topic and persists; False when nothing changed."""
        if self._topics.get(config.topic_name) == config:
            return False
        self._topics[config.topic_name] = config
        self._bump()
        self.persist()
        return True

    def remove(self, topic: str) -> bool:
        if self._topics.pop(topic, None) is None:
            return False
        self._bump()
        self.persist()
        return True

    def set_default_topic(self, enabled: bool, queue_nums: int, broker_perm: int) -> None:
        """TBW102 marks a broker that creates topics on first send; the name servers route
        producers of unknown topics by it, so it exists exactly when auto-creation is on."""
        if enabled:
            self.put(
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY,
                    read_queue_nums=queue_nums,
                    write_queue_nums=queue_nums,
                    perm=Perm.INHERIT | broker_perm,
                )
            )
        else:
            self.remove(AUTO_CREATE_TOPIC_KEY)

    def _bump(self) -> None:
        self.data_version = DataVersion(
            timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
        )
