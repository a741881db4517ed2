"""The ha-replicator's configuration: the broker's (broker.conf is shared by the whole broker
group), under RocketMQ's key names."""

from __future__ import annotations

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig


class HaConfig(BrokerConfig, kw_only=True):
    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def ha_port(self) -> int:
        """haListenPort; 0 means listenPort + 1, or any free port when listenPort is 0 too
        (the launcher then hands the bound port to remoting)."""
        if self.ha_listen_port:
            return self.ha_listen_port
        return self.listen_port + 1 if self.listen_port else 0

    def listen_endpoint(self) -> str:
        return f"tcp://{self.listen_host}:{self.ha_port}"

    def check(self) -> None:
        super().check()
        if not self.store_endpoint:
            raise ConfigError(
                "storeEndpoint must name this broker's broker-store (its READY line gives "
                "endpoint=)"
            )
        if not self.is_slave and not self.store_feed_endpoint:
            raise ConfigError(
                "a master's ha-replicator follows its store's feed: set storeFeedEndpoint "
                "(the store's READY line gives feed=)"
            )
        if self.is_slave and not self.ha_master_address and not self.enable_controller_mode:
            raise ConfigError(
                "a SLAVE's ha-replicator needs haMasterAddress (host:port of the master's "
                "haListenPort), unless enableControllerMode=true (the controller names it)"
            )
