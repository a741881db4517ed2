"""The controller's config keys (RocketMQ 5's names where it has them), from the same
sources as every service: a properties file, FERRY_<key>, --set key=value."""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from ferry.protocol.errors import ConfigError
from ferry.runtime.security.config import SecurityConfig

MIN_HEARTBEAT_TIMEOUT_MS = 2000  # etcd's shortest lease is about 2 s (1.5 election timeouts)


class ControllerConfig(SecurityConfig, rename="camel", kw_only=True):
    controller_listen_port: int = 9878
    listen_host: str = "127.0.0.1"
    # etcd's client URLs, `;`-separated; the controller moves to the next one on a failure
    etcd_endpoints: str = "http://127.0.0.1:2379"
    # a replica whose heartbeats stop for this long is dead (its etcd lease lapses); a master
    # is granted write leases shorter than this (heartbeat_lease_ms)
    controller_heart_beat_timeout_mills: int = 10_000
    # how often groups whose master's lease lapsed are looked for (and elections run)
    scan_not_active_broker_interval: int = 1000
    # elect an out-of-sync replica (the one with the largest max offset) when no in-sync
    # replica is alive: availability at the price of losing what it had not copied
    enable_elect_unclean_master: bool = False
    # Ferry-only: one etcd call's timeout
    etcd_timeout_mills: int = 1000

    def check(self) -> None:
        if not 0 <= self.controller_listen_port <= 65535:
            raise ConfigError(f"controllerListenPort {self.controller_listen_port} is not a port")
        if self.controller_heart_beat_timeout_mills < MIN_HEARTBEAT_TIMEOUT_MS:
            raise ConfigError(
                f"controllerHeartBeatTimeoutMills must be at least {MIN_HEARTBEAT_TIMEOUT_MS} "
                "(etcd's shortest lease)"
            )
        if self.scan_not_active_broker_interval < 10:
            raise ConfigError("scanNotActiveBrokerInterval must be at least 10 ms")
        if not 10 <= self.etcd_timeout_mills <= 60_000:
            raise ConfigError("etcdTimeoutMills must be within 10..60000")
        self.endpoints()
        self.check_security()

    def endpoints(self) -> list[tuple[str, str, int]]:
        """etcdEndpoints as (scheme, host, port); ConfigError naming a bad one."""
        out = []
        for item in self.etcd_endpoints.replace(",", ";").split(";"):
            text = item.strip()
            if not text:
                continue
            url = urlsplit(text if "://" in text else f"http://{text}")
            try:
                port = url.port
            except ValueError:
                port = None
            if url.scheme not in ("http", "https") or not url.hostname or port is None:
                raise ConfigError(f"etcdEndpoints: {text!r} is not http://host:port")
            out.append((url.scheme, url.hostname, port))
        if not out:
            raise ConfigError("etcdEndpoints is empty")
        return out

    @property
    def lease_ttl_s(self) -> int:
        """The TTL of a replica's etcd lease: the heartbeat timeout, rounded up to seconds."""
        return math.ceil(self.controller_heart_beat_timeout_mills / 1000)

    @property
    def heartbeat_lease_ms(self) -> int:
        """The write lease a master's heartbeat is granted, counted by the broker from the
        heartbeat's send: a fifth (at least 500 ms) short of the heartbeat timeout, so that it
        always ends before the master's etcd lease, refreshed after that send, can lapse."""
        timeout = self.controller_heart_beat_timeout_mills
        return timeout - max(500, timeout // 5)
