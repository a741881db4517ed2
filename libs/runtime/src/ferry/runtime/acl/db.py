"""AuthDb: the users and ACLs in memory, and the one question the request guard asks of
them: may this user do this to that resource from that address?

The rules (RocketMQ 5.3's ACL 2.0, with Deny made absolute):
- an unknown or disabled user may do nothing; a Super user may do everything;
- a Normal user may do what an Allow entry of its ACL grants (the entry's resource pattern
  matches, one of its actions is the one asked or All, the source address is in its ranges)
  and no matching Deny entry takes away; nothing allowed means refused (default deny).
  RocketMQ lets the most specific entry decide; here a Deny wins over any Allow, so a broad
  Deny cannot be undone by a narrower Allow.
- a request asking for Action.ANY (any one action on the resource will do, e.g. reading a
  route) is allowed when some concrete action is allowed and not denied.

Reads never lock: load() builds new indexes and swaps one reference, which readers take once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from ferry.protocol.messages import AuthSnapshot, AuthUser
from ferry.runtime.acl import model
from ferry.runtime.acl.edits import check_snapshot
from ferry.runtime.acl.model import Action, Resource


@dataclass(frozen=True)
class Rule:
    """A policy entry, parsed once at load."""

    pattern: model.Pattern
    actions: frozenset[Action]
    networks: tuple[model.Network, ...]
    deny: bool

    def covers(self, action: Action) -> bool:
        return Action.ALL in self.actions or action in self.actions


@dataclass(frozen=True)
class _State:
    snapshot: AuthSnapshot
    digest: str
    users: dict[str, AuthUser]
    rules: dict[str, tuple[Rule, ...]]  # username -> its ACL's entries


def digest(snapshot: AuthSnapshot) -> str:
    return hashlib.sha256(msgspec.msgpack.encode(snapshot)).hexdigest()


def _rules(snapshot: AuthSnapshot) -> dict[str, tuple[Rule, ...]]:
    out: dict[str, tuple[Rule, ...]] = {}
    for acl in snapshot.acls:
        out[model.subject_user(acl.subject)] = tuple(
            Rule(
                model.parse_pattern(e.resource),
                frozenset(model.parse_action(a) for a in e.actions),
                tuple(model.parse_source_ip(ip) for ip in e.source_ips),
                e.decision == model.DENY,
            )
            for e in acl.entries
        )
    return out


class AuthDb:
    def __init__(self, snapshot: AuthSnapshot | None = None) -> None:
        self._lock = threading.Lock()  # writers only
        self._state = _State(AuthSnapshot(), digest(AuthSnapshot()), {}, {})
        if snapshot is not None:
            self.load(snapshot)

    @property
    def version(self) -> int:
        return self._state.snapshot.version

    def load(
        self,
        snapshot: AuthSnapshot,
        *,
        before: Callable[[AuthSnapshot], None] | None = None,
    ) -> None:
        """Takes the snapshot whole (InvalidParameterError, and nothing taken, if any part of
        it is wrong). before(checked snapshot) runs last before readers see it (saving it:
        an exception there leaves the old one in force)."""
        snapshot = check_snapshot(snapshot)
        users = {u.username: u for u in snapshot.users}
        state = _State(snapshot, digest(snapshot), users, _rules(snapshot))
        with self._lock:
            if before is not None:
                before(snapshot)
            self._state = state

    def snapshot(self) -> AuthSnapshot:
        return self._state.snapshot

    @property
    def digest(self) -> str:
        """Tells two copies apart whatever their versions (a slave's and its master's)."""
        return self._state.digest

    def user(self, username: str) -> AuthUser | None:
        return self._state.users.get(username)

    def authorize(
        self, username: str, resource: Resource, action: Action, source_ip: str
    ) -> str | None:
        """None when allowed; else why not, naming the permission missing."""
        state = self._state
        user = state.users.get(username)
        if user is None:
            return f"user {username} does not exist"
        if user.user_status != model.ENABLE:
            return f"user {username} is disabled"
        if user.user_type == model.SUPER:
            return None
        rules = [r for r in state.rules.get(username, ()) if r.pattern.matches(resource)]
        addrs = model.parse_address(source_ip)
        here = [r for r in rules if model.ip_in(addrs, r.networks)]
        actions = CONCRETE if action is Action.ANY else (action,)
        denied_by = ""
        for wanted in actions:
            deny = next((r for r in here if r.deny and r.covers(wanted)), None)
            if deny is not None:
                denied_by = denied_by or deny.pattern.text
                continue
            if any(not r.deny and r.covers(wanted) for r in here):
                return None
        asked = f"user {username} may not {action.value} on {resource}"
        if denied_by:
            return f"{asked} (denied by {denied_by})"
        if any(not r.deny and any(r.covers(a) for a in actions) for r in rules):
            return f"{asked} (no policy allows it from {source_ip})"
        return f"{asked} (no policy allows it)"


CONCRETE = model.CONCRETE_ACTIONS
