"""What getBrokerConfig / getNamesrvConfig show, and the check of a change made while a
service runs (updateBrokerConfig / updateNamesrvConfig): one place for both services."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

import msgspec

from ferry.protocol.errors import ConfigError, InvalidParameterError

# keys holding a password or secret key: shown as set or not, never their value
SECRET_KEYS = frozenset({"initAuthenticationUser", "innerClientAuthenticationCredentials"})
HIDDEN = "(hidden)"

C = TypeVar("C", bound=msgspec.Struct)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def shown(config: msgspec.Struct) -> dict[str, str]:
    """Every key in force, as a conf file would spell it (secrets hidden)."""
    return {
        k: HIDDEN if k in SECRET_KEYS and v else _text(v)
        for k, v in sorted(msgspec.to_builtins(config).items())
    }


def checked_change(
    config: C, changes: Mapping[str, str], live_keys: Collection[str], *, keys: str, where: str
) -> C:
    """The config with the changes, checked as at start; InvalidParameterError naming what is
    wrong (no key, an unknown key, one that needs a restart, a bad value), nothing changed.
    keys: what the keys are called ("broker.conf"); where: where else to set them."""
    if not changes:
        raise InvalidParameterError("no key to update")
    known = {f.encode_name for f in msgspec.structs.fields(type(config))}
    unknown = sorted(k for k in changes if k not in known)
    if unknown:
        raise InvalidParameterError(f"unknown {keys} key(s): {', '.join(unknown)}")
    restart = sorted(k for k in changes if k not in live_keys)
    if restart:
        raise InvalidParameterError(
            f"{', '.join(restart)} cannot change while it runs: set it in {where} and restart "
            f"(keys that change live: {', '.join(sorted(live_keys))})"
        )
    values = msgspec.to_builtins(config)
    values.update(changes)
    try:
        candidate = msgspec.convert(values, type(config), strict=False)
        check = getattr(candidate, "check", None)
        if check is not None:
            check()
    except (msgspec.ValidationError, ConfigError) as exc:
        raise InvalidParameterError(f"bad value: {exc}") from None
    return candidate
