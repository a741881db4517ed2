"""The store's configuration: the broker's (broker.conf is shared by the whole broker group),
checked for the retention keys the store alone reads."""

from __future__ import annotations

from ferry.runtime.config import BrokerConfig
from ferry.store.retention import check_retention_config


class StoreConfig(BrokerConfig, kw_only=True):
    def check(self) -> None:
        super().check()
        check_retention_config(self)
