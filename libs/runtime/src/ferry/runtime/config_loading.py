"""Loading a service's typed config: defaults, the broker.conf file, FERRY_<key> environment
variables (plus NAMESRV_ADDR), updateBrokerConfig's overlay, then `--set key=value` flags."""

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

# Old RocketMQ spellings still found in broker.conf files (the seed uses them).
ALIASES = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
    "haSlaveFallbehindMax": "haMaxGapNotInSync",  # RocketMQ 4.x's name
}


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
    if "storePathRootDir" in known:  # updateBrokerConfig's changes outlive a restart
        root = (overrides or {}).get("storePathRootDir") or raw.get("storePathRootDir")
        overlay = read_overlay(root or _default(cls, "storePathRootDir"))
        raw.update({k: v for k, v in overlay.items() if ALIASES.get(k, k) in known})
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


OVERLAY_FILE = "broker-overlay.conf"


def overlay_path(store_root: str | Path) -> Path:
    """<storePathRootDir>/config/broker-overlay.conf: the keys updateBrokerConfig changed,
    applied over broker.conf and the environment (not over --set) at every start."""
    return Path(os.path.expanduser(str(store_root))) / "config" / OVERLAY_FILE


def read_overlay(store_root: str | Path) -> dict[str, str]:
    path = overlay_path(store_root)
    try:
        return read_properties(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _default(cls: type[msgspec.Struct], key: str) -> str:
    for f in msgspec.structs.fields(cls):
        if f.encode_name == key:
            return str(f.default)
    return ""


def parse_overrides(items: list[str]) -> dict[str, str]:
    """['key=value', ...] from repeated --set flags."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out
