"""The index's configuration: the broker's (broker.conf is shared by the whole broker group)
plus the index file geometry, under RocketMQ's key names."""

from __future__ import annotations

from ferry.index.index_store import Geometry
from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig

MAX_SLOTS = 1 << 30
MAX_ENTRIES = (1 << 32) - 1  # entry numbers are u32


class IndexConfig(BrokerConfig, kw_only=True):
    # slots of the hash table and entries of one index file (RocketMQ's defaults: a file of
    # 5M slots and 20M entries; here 660 MB, allocated as it fills)
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000

    @property
    def geometry(self) -> Geometry:
        return Geometry(self.max_hash_slot_num, self.max_index_num)

    @property
    def index_dir(self) -> str:
        return str(self.store_root / "index")

    def listen_endpoint(self) -> str:
        """indexEndpoint, or an ipc socket under <store>/run (tcp on a free port when that
        path is too long for a unix socket)."""
        return self.index_endpoint or self.run_endpoint("index.sock")

    def check(self) -> None:
        super().check()
        if not 1 <= self.max_hash_slot_num <= MAX_SLOTS:
            raise ConfigError(f"maxHashSlotNum must be within 1..{MAX_SLOTS}")
        if not 1 <= self.max_index_num <= MAX_ENTRIES:
            raise ConfigError(f"maxIndexNum must be within 1..{MAX_ENTRIES}")
        if not self.store_endpoint or not self.store_feed_endpoint:
            raise ConfigError(
                "storeEndpoint and storeFeedEndpoint must name this broker's broker-store "
                "(its READY line gives endpoint= and feed=)"
            )
