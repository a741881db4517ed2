"""The check every request passes before its handler, when authentication is on.

One guard per service (ferry.runtime.service.Service): it proves who signed the request
(ferry.protocol.auth), then asks whether that identity may do it (permissions.RULES and the
users' ACLs). The cluster's own services sign with the inner credentials and may do
everything; internal ports (store, index, scheduler, check-back, HA) serve no one else. A
refusal is a typed error naming what was missing; the handler never runs, so nothing changes.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Protocol

from ferry.protocol.auth import Credentials, fresh, signature_ok
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import (
    BadSignatureError,
    FerryError,
    NoCredentialsError,
    NoPermissionError,
)
from ferry.protocol.framing import RequestEnvelope
from ferry.runtime.acl import Action, Resource
from ferry.runtime.acl.model import GROUP_TOPIC_PREFIXES
from ferry.runtime.security.permissions import INTERNAL, SUPER, Need, Needs, needs
from ferry.runtime.throttled_log import ThrottledLog

log = logging.getLogger("ferry.security")

SUPER_TYPE = "Super"


class Users(Protocol):
    """The users and their ACLs (ferry.runtime.acl.AuthDb)."""

    def user(self, username: str) -> Any: ...

    def authorize(
        self, username: str, resource: Any, action: Any, source_ip: str
    ) -> str | None: ...


class Guard:
    def __init__(
        self,
        service: str,
        *,
        inner: Credentials,
        authorization: bool,
        internal_only: bool,
        cluster: str = "",
        users: Users | None = None,
    ) -> None:
        self.service = service
        self.inner = inner
        self.authorization = authorization
        self.internal_only = internal_only
        self.cluster = cluster
        self.users = users  # None: only the inner identity authenticates (no user known yet)
        # by (reason, request type): what metrics export
        self.refusals: Counter[tuple[str, str]] = Counter()
        self._log = ThrottledLog(log)

    def check(
        self, env: RequestEnvelope, frames: list[Any], source_ip: str = ""
    ) -> FerryError | None:
        """frames: [protocol id, header, *payload, signature] as received. None: allowed."""
        err = self._check(env, frames, source_ip)
        if err is not None:
            reason = ResponseCode(err.code).name
            self.refusals[reason, type(env.body).__name__] += 1
            who = env.auth.access_key if env.auth is not None else "-"
            self._log.warning(
                "%s: refused %s from %s (%s): %s",
                self.service,
                type(env.body).__name__,
                who,
                source_ip or "?",
                err.message,
            )
        return err

    def _check(self, env: RequestEnvelope, frames: list[Any], source_ip: str) -> FerryError | None:
        name = type(env.body).__name__
        signed = env.auth
        if signed is None:
            return NoCredentialsError(
                f"{self.service} has authentication on: {name} needs credentials "
                "(an access key and a secret key)"
            )
        found = self.secret_of(signed.access_key)
        if isinstance(found, FerryError):
            return found
        user, secret = found
        if signed.header_only and user is not None:
            return BadSignatureError(
                f"{signed.access_key!r} signed the header of {name} only: a user's signature "
                "must cover the payload"
            )
        covered = () if signed.header_only else frames[2:-1]
        if not signature_ok(secret, frames[1], covered, frames[-1]):
            return BadSignatureError(
                f"the signature of {name} does not match access key {signed.access_key!r} "
                "(wrong secret key?)"
            )
        if not fresh(signed):
            return BadSignatureError(
                f"the signature of {name} is too old or from the future (check the clocks)"
            )
        if user is None:
            return None  # the cluster's own services
        return self.permit(signed.access_key, user, env.body, source_ip)

    def secret_of(self, access_key: str) -> tuple[Any, str] | FerryError:
        """(the user, or None for the cluster's own services; the secret key to check a
        signature with) of access_key, or why that key cannot sign here."""
        if access_key == self.inner.access_key:
            return None, self.inner.secret_key
        if self.internal_only:
            return self._not_a_service(access_key)
        user = self.users.user(access_key) if self.users is not None else None
        if user is None:
            return BadSignatureError(f"unknown access key {access_key!r}")
        if getattr(user, "user_status", "enable") != "enable":
            return BadSignatureError(f"user {access_key!r} is disabled")
        return user, str(user.password)

    def permit(self, access_key: str, user: Any, body: Any, source_ip: str) -> FerryError | None:
        """Whether `user` (authenticated as access_key) may send request `body`: the
        permission rules and the user's ACLs. Every wire asks this after its own check of
        the signature (a protocol door signs its own way)."""
        name = type(body).__name__
        # a name server or controller belongs to no one cluster: the user's group's
        cluster = self.cluster or self._cluster_of(access_key)
        need = needs(body, cluster)
        if need == INTERNAL:
            return NoPermissionError(
                f"{name} is sent only by the cluster's own services, not by user {access_key!r}",
                retriable=False,
            )
        return self.permit_needs(access_key, user, name, need, source_ip)

    def permit_needs(
        self, access_key: str, user: Any, name: str, need: Needs, source_ip: str
    ) -> FerryError | None:
        """Whether `user` may do what request `name` needs (SUPER or resource permissions):
        the check of permit(), for a door whose requests are not Ferry's (the gRPC proxy)."""
        if getattr(user, "user_type", "") == SUPER_TYPE or not self.authorization:
            return None
        if need == SUPER:
            return NoPermissionError(
                f"{name} needs a Super user; {access_key!r} is not one", retriable=False
            )
        assert isinstance(need, list)
        for item in need:
            reason = self._allowed(access_key, item, source_ip)
            if reason is not None:
                return NoPermissionError(f"{name} refused: {reason}", retriable=False)
        return None

    def count_refusal(self, err: FerryError, request: str, who: str, source_ip: str) -> None:
        """A refusal made outside check() (a protocol door's), counted and logged alike."""
        self.refusals[ResponseCode(err.code).name, request] += 1
        self._log.warning(
            "%s: refused %s from %s (%s): %s",
            self.service,
            request,
            who,
            source_ip or "?",
            err.message,
        )

    def _cluster_of(self, username: str) -> str:
        cluster_of = getattr(self.users, "cluster_of", None)
        return str(cluster_of(username)) if cluster_of is not None else ""

    def _not_a_service(self, access_key: str) -> FerryError:
        return NoPermissionError(
            f"{self.service} serves only the cluster's own services, not {access_key!r}",
            retriable=False,
        )

    def _allowed(self, username: str, need: Need, source_ip: str) -> str | None:
        assert self.users is not None
        # a group's retry and dead-letter topics are checked as the group, as in RocketMQ
        group_topic = need.kind == "Topic" and need.name.startswith(GROUP_TOPIC_PREFIXES)
        resource = Resource.group(need.name) if group_topic else Resource(need.kind, need.name)
        first = None
        for action in need.actions:
            reason = self.users.authorize(username, resource, Action(action), source_ip)
            if reason is None:
                return None
            first = first or reason
        return first
