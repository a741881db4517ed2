"""The check-back's configuration: the broker's (broker.conf is shared by the broker group);
its own keys are transactionTimeOut, transactionCheckInterval and transactionCheckMax there."""

from __future__ import annotations

from pathlib import Path

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig


class CheckbackConfig(BrokerConfig, kw_only=True):
    @property
    def checkback_dir(self) -> Path:
        return self.store_root / "checkback"

    @property
    def scheduler_dir_of_old(self) -> Path:
        """Where the scheduler kept the checker's progress when it hosted it."""
        return self.store_root / "scheduler"

    def listen_endpoint(self) -> str:
        """checkbackEndpoint, or an ipc socket under <store>/run (tcp on a free port when that
        path is too long for a unix socket)."""
        return self.checkback_endpoint or self.run_endpoint("checkback.sock")

    def check(self) -> None:
        super().check()
        if not self.store_endpoint:
            raise ConfigError(
                "storeEndpoint must name this broker's broker-store (its READY line gives "
                "endpoint=)"
            )
