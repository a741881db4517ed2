"""Consumer group configs (RocketMQ's SubscriptionGroupManager), kept in
config/subscriptionGroup.json.

With autoCreateSubscriptionGroup a group is created the first time it is used; without it,
a group must be created by an admin first and unknown groups get SUBSCRIPTION_GROUP_NOT_EXIST.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ferry.protocol.errors import SubscriptionGroupNotExistError
from ferry.protocol.messages import SubscriptionGroupConfig
from ferry.protocol.names import check_group
from ferry.remoting.state_file import load_json, save_json

FILE_NAME = "subscriptionGroup.json"

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupTable"]


class _GroupFile(msgspec.Struct, rename="camel", kw_only=True):
    subscription_group_table: dict[str, SubscriptionGroupConfig] = {}


class SubscriptionGroupTable:
    def __init__(self, config_dir: Path, *, auto_create: bool) -> None:
        self.path = config_dir / FILE_NAME
        self.auto_create = auto_create
        self._groups: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        state = load_json(self.path, _GroupFile)
        if state is not None:
            self._groups = dict(state.subscription_group_table)

    def persist(self) -> None:
        save_json(
            self.path,
            _GroupFile(subscription_group_table=dict(sorted(self._groups.items()))),
        )

    def __len__(self) -> int:
        return len(self._groups)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self._groups.get(group)

    def ensure(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, created now if it is new and auto-creation is on."""
        config = self._groups.get(group)
        if config is not None:
            return config
        check_group(group)
        if not self.auto_create:
            raise SubscriptionGroupNotExistError(
                f"subscription group {group!r} does not exist and "
                "autoCreateSubscriptionGroup is off"
            )
        config = SubscriptionGroupConfig(group_name=group)
        self.put(config)
        return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        check_group(config.group_name)
        self._groups[config.group_name] = config
        self.persist()

    def remove(self, group: str) -> bool:
        if self._groups.pop(group, None) is None:
            return False
        self.persist()
        return True

    def all(self) -> list[SubscriptionGroupConfig]:
        return [self._groups[name] for name in sorted(self._groups)]
