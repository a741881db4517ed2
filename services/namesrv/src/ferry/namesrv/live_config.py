"""getNamesrvConfig and updateNamesrvConfig: the keys in force, and the few that change while
the name server runs. A change lasts until the name server restarts (it has no config file of
its own to write; put the key in its conf file or --set to keep it)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from ferry.protocol.messages import (
    GetNamesrvConfigRequest,
    NamesrvConfigReply,
    OkReply,
    UpdateNamesrvConfigRequest,
)
from ferry.runtime.config import NamesrvConfig
from ferry.runtime.live_config import checked_change, shown
from ferry.runtime.service import Call

log = logging.getLogger("ferry.namesrv.config")

LIVE_KEYS = frozenset({"scanNotActiveBrokerInterval"})


class LiveConfig:
    def __init__(self, config: NamesrvConfig, applied: Callable[[set[str]], None]) -> None:
        self.config = config
        self._applied = applied
        self._fields = {f.encode_name: f.name for f in msgspec.structs.fields(NamesrvConfig)}

    def get(self, _req: GetNamesrvConfigRequest, _call: Call) -> NamesrvConfigReply:
        return NamesrvConfigReply(config=shown(self.config), live_keys=sorted(LIVE_KEYS))

    def update(self, req: UpdateNamesrvConfigRequest, _call: Call) -> OkReply:
        changes = {k.strip(): v.strip() for k, v in req.properties.items()}
        candidate = checked_change(
            self.config, changes, LIVE_KEYS, keys="name server", where="its config"
        )
        for key in changes:
            name = self._fields[key]
            setattr(self.config, name, getattr(candidate, name))
        self._applied(set(changes))
        log.info("config changed live: %s", ", ".join(f"{k}={v}" for k, v in changes.items()))
        return OkReply()
