"""Typed service configuration from broker.conf, the environment and CLI flags.

Precedence, lowest first: defaults, the broker.conf file, FERRY_<key> environment variables
(plus NAMESRV_ADDR, as RocketMQ), then `--set key=value` flags. Keys are RocketMQ's
broker.conf names; unknown keys are reported once and ignored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ferry.protocol.errors import ConfigError
from ferry.runtime.properties import read_properties

log = logging.getLogger("ferry.config")

_SPECIAL_NAMES = {"broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2"}
# Old RocketMQ spellings still found in broker.conf files (the seed uses them).
ALIASES = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}


def _conf_name(field: str) -> str:
    if field in _SPECIAL_NAMES:
        return _SPECIAL_NAMES[field]
    head, *rest = field.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
GiB = 1024 * 1024 * 1024


class NamesrvConfig(msgspec.Struct, rename=_conf_name, kw_only=True):
    listen_port: int = 9876
    listen_host: str = "127.0.0.1"
    # how often silent brokers are looked for
    scan_not_active_broker_interval: int = 5000
    kv_config_path: str = ""

    def check(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        if self.scan_not_active_broker_interval <= 0:
            raise ConfigError("scanNotActiveBrokerInterval must be more than 0 ms")


class BrokerConfig(msgspec.Struct, rename=_conf_name, kw_only=True):
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    namesrv_addr: str = ""
    listen_port: int = 10911
    listen_host: str = "127.0.0.1"
    ha_listen_port: int = 0  # 0: listenPort + 1
    broker_ip1: str = ""  # advertised address; empty: listen host (or 127.0.0.1)
    broker_ip2: str = ""
    broker_permission: int = 6
    store_path_root_dir: str = "~/store"
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    mapped_file_size_commit_log: int = GiB
    mapped_file_size_consume_queue: int = 6_000_000
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    max_message_size: int = 4 * 1024 * 1024
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    register_name_server_period: int = 30_000
    long_polling_enable: bool = True
    flush_consumer_offset_interval: int = 5000
    # requests held or in flight above this get SYSTEM_BUSY at once
    max_pending_requests: int = 10_000
    # internal endpoints between the broker's services; empty: derived from the store path
    store_endpoint: str = ""
    store_feed_endpoint: str = ""
    # the index service's endpoint (QUERY_MESSAGE); empty: queries by key are not served
    index_endpoint: str = ""
    # broker-store retention and disk guard (RocketMQ's diskSpaceWarningLevelRatio: above it,
    # writes are refused; cleanResourceInterval: how often retention runs)
    disk_space_warning_level_ratio: int = 90
    clean_resource_interval: int = 10_000
    # testing knob: a used-disk percentage that replaces the measured one (-1: measure)
    disk_used_ratio_override: int = -1

    @property
    def store_root(self) -> Path:
        return Path(os.path.expanduser(self.store_path_root_dir))

    @property
    def advertised_host(self) -> str:
        if self.broker_ip1:
            return self.broker_ip1
        return "127.0.0.1" if self.listen_host in ("", "0.0.0.0", "*") else self.listen_host

    @property
    def is_sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    def check(self) -> None:
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise ConfigError(
                f"brokerRole must be ASYNC_MASTER, SYNC_MASTER or SLAVE, not {self.broker_role!r}"
            )
        if self.flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ConfigError(
                f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}"
            )
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port")
        if self.mapped_file_size_commit_log < 64 * 1024:
            raise ConfigError("mappedFileSizeCommitLog must be at least 65536 bytes")
        if self.mapped_file_size_consume_queue < 20 or self.mapped_file_size_consume_queue % 20:
            raise ConfigError(
                "mappedFileSizeConsumeQueue must be a positive multiple of 20 "
                "(one ConsumeQueue entry)"
            )
        if not 0 < self.max_message_size <= 64 * 1024 * 1024:
            raise ConfigError("maxMessageSize must be between 1 byte and 64 MiB")
        if self.broker_id < 0:
            raise ConfigError("brokerId must be 0 (master) or more (slave)")
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ConfigError("diskMaxUsedSpaceRatio must be within 10..95")


C = TypeVar("C", bound=msgspec.Struct)


def known_keys(cls: type[msgspec.Struct]) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(cls)}


def load_config(
    cls: type[C],
    conf_file: str | Path | None = None,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> C:
    """Builds a config object; raises ConfigError naming the key for any bad value."""
    env = os.environ if environ is None else environ
    raw: dict[str, str] = {}
    if conf_file:
        try:
            raw.update(read_properties(conf_file))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {conf_file}: {exc}") from None
    known = known_keys(cls)
    for key in known:
        if f"FERRY_{key}" in env:
            raw[key] = env[f"FERRY_{key}"]
    if "namesrvAddr" in known and "NAMESRV_ADDR" in env and "namesrvAddr" not in (overrides or {}):
        raw.setdefault("namesrvAddr", env["NAMESRV_ADDR"])
    raw.update(overrides or {})
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        if name in known:
            values[name] = value
        else:
            unknown.append(key)
    if unknown:
        log.warning("ignoring config keys Ferry does not use: %s", ", ".join(sorted(unknown)))
    try:
        config = msgspec.convert(values, cls, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"bad config value: {exc}") from None
    check = getattr(config, "check", None)
    if check is not None:
        check()
    return config


def parse_overrides(items: list[str]) -> dict[str, str]:
    """['key=value', ...] from repeated --set flags."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out
