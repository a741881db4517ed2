"""The name server's kv store (mqadmin updateKvConfig / deleteKvConfig / updateOrderConf):
namespace -> key -> value, kept in kvConfigPath as JSON when that is set, in memory only when
it is empty (name servers are independent: each keeps what it was told)."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from ferry.protocol.errors import ConfigError, InvalidParameterError
from ferry.runtime.files import load_json, save_json

log = logging.getLogger("ferry.namesrv.kv")

MAX_NAME = 255
MAX_VALUE = 64 * 1024


class KvFile(msgspec.Struct, rename="camel"):
    config_table: dict[str, dict[str, str]] = {}


def check_entry(namespace: str, key: str, value: str = "") -> None:
    for what, text in (("namespace", namespace), ("key", key)):
        if not text.strip():
            raise InvalidParameterError(f"{what} is empty")
        if len(text) > MAX_NAME or not text.isprintable():
            raise InvalidParameterError(
                f"{what} {text[:40]!r} must be printable and at most {MAX_NAME} characters"
            )
    if len(value) > MAX_VALUE:
        raise InvalidParameterError(f"value is {len(value)} characters, over {MAX_VALUE}")


class KvStore:
    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser() if path else None
        self.table: dict[str, dict[str, str]] = {}
        if self.path is not None:
            try:
                loaded = load_json(self.path, KvFile)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ConfigError(
                    f"kvConfigPath {self.path} is not a kv config file: {exc}"
                ) from None
            if loaded is not None:
                self.table = loaded.config_table
                log.info("kv config loaded from %s", self.path)

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def put(self, namespace: str, key: str, value: str) -> None:
        check_entry(namespace, key, value)
        self.table.setdefault(namespace, {})[key] = value
        self._save()
        log.info("kv config put: %s / %s", namespace, key)

    def delete(self, namespace: str, key: str) -> bool:
        check_entry(namespace, key)
        keys = self.table.get(namespace, {})
        if key not in keys:
            return False
        del keys[key]
        if not keys:
            del self.table[namespace]
        self._save()
        log.info("kv config deleted: %s / %s", namespace, key)
        return True

    def _save(self) -> None:
        if self.path is not None:
            save_json(self.path, {"configTable": self.table})
