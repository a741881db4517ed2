"""getBrokerConfig and updateBrokerConfig: the broker.conf keys in force, and the ones that
change without a restart.

A change is applied to the running services (the store's retention keys through the store)
and kept in <storePathRootDir>/config/broker-overlay.conf, which every broker service reads
over broker.conf at start (ferry.runtime.config). Keys read only at start-up (ports, paths,
sizes, roles, flush mode, ...) are refused with a message saying a restart is needed, as are
keys Ferry does not know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from ferry.protocol.errors import BrokerSystemError, InvalidParameterError
from ferry.protocol.messages import (
    AnyReply,
    BrokerConfigReply,
    ErrorReply,
    GetBrokerConfigRequest,
    OkReply,
    StoreUpdateConfigRequest,
    UpdateBrokerConfigRequest,
)
from ferry.remoting.calls import Caller
from ferry.remoting.state_file import write_atomic
from ferry.runtime.config import ALIASES, BrokerConfig, overlay_path, read_overlay
from ferry.runtime.live_config import checked_change, shown
from ferry.runtime.service import Peer

log = logging.getLogger("ferry.remoting.config")

# read by remoting on every request (see apply hooks in app.py)
REMOTING_LIVE_KEYS = frozenset(
    {
        "brokerPermission",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "defaultTopicQueueNums",
        "maxMessageSize",
        "longPollingEnable",
        "enablePropertyFilter",
        "popInitFreshMillis",
    }
)
# taken by broker-store while running (its admin_handlers.LIVE_KEYS: services share no code)
STORE_LIVE_KEYS = frozenset(
    {"fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio", "diskSpaceWarningLevelRatio"}
)
LIVE_KEYS = REMOTING_LIVE_KEYS | STORE_LIVE_KEYS
STORE_TIMEOUT_S = 5.0


class LiveConfig:
    def __init__(
        self,
        config: BrokerConfig,
        store: Peer,
        apply: Callable[[BrokerConfig, set[str]], None],
    ) -> None:
        self._config = config
        self._store = store
        self._apply = apply
        self._fields = {f.encode_name: f.name for f in msgspec.structs.fields(BrokerConfig)}

    def get(self, _req: GetBrokerConfigRequest, _call: Caller) -> BrokerConfigReply:
        return BrokerConfigReply(config=shown(self._config), live_keys=sorted(LIVE_KEYS))

    def update(self, req: UpdateBrokerConfigRequest, call: Caller) -> None:
        changes = {ALIASES.get(k.strip(), k.strip()): v.strip() for k, v in req.properties.items()}
        if any("\n" in v or " #" in v for v in changes.values()):
            raise InvalidParameterError("a value may not hold a line break or ' #'")
        candidate = checked_change(
            self._config, changes, LIVE_KEYS, keys="broker.conf", where="broker.conf"
        )
        store_part = {k: v for k, v in changes.items() if k in STORE_LIVE_KEYS}
        if not store_part:
            self._commit(candidate, changes)
            call.reply(OkReply())
            return

        def on_reply(body: AnyReply, _frames: list[Any]) -> None:
            if isinstance(body, OkReply):
                try:
                    self._commit(candidate, changes)
                except OSError as exc:
                    call.fail(BrokerSystemError(f"config changed but not saved: {exc}"))
                    return
                call.reply(OkReply())
            elif isinstance(body, ErrorReply):
                call.reply(body)
            else:
                call.fail(BrokerSystemError(f"store answered with {type(body).__name__}"))

        self._store.request(
            StoreUpdateConfigRequest(properties=store_part), on_reply, timeout_s=STORE_TIMEOUT_S
        )

    def _commit(self, candidate: BrokerConfig, changes: dict[str, str]) -> None:
        """Persists first (a change that would be lost at restart is not made), then applies."""
        self._persist(changes)
        for key in changes:
            name = self._fields[key]
            setattr(self._config, name, getattr(candidate, name))
        self._apply(self._config, set(changes))
        log.info("config changed live: %s", ", ".join(f"{k}={v}" for k, v in changes.items()))

    def _persist(self, changes: dict[str, str]) -> None:
        root = self._config.store_path_root_dir
        kept = read_overlay(root)
        kept.update(changes)
        lines = ["# written by updateBrokerConfig; read over broker.conf at every start"]
        lines += [f"{k}={v}" for k, v in sorted(kept.items())]
        text = "\n".join(lines) + "\n"
        write_atomic(overlay_path(root), text.encode())
