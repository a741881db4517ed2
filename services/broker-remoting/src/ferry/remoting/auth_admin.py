"""ACL 2.0's admin requests (createUser ... listAcl) and the snapshot a slave copies.

The users and ACLs live in config/auth.json (AuthFile) and in memory in an AuthDb, which
the request guard reads. A change is computed on the current snapshot (ferry.runtime.acl
edits), saved atomically, then loaded into the AuthDb, and only then answered: a reply means
the change survives a crash. A slave takes no change; it copies its master's snapshot at each
metadata sync (slave_sync.py), and that copy is saved and loaded the same way.

Passwords are never logged, and never cross the wire in clear (issue 27): createUser and
updateUser bring them sealed with the secret key of the access key that sealed them (the
admin's credentials: a user's password, or the inner secret key), getUser and listUser answer
without them, and a slave's copy travels sealed with the inner secret key. With
authentication off there is no key: a password then comes in clear, and only then.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ferry.protocol.auth import Credentials, seal, unseal
from ferry.protocol.errors import (
    BadSignatureError,
    BrokerSystemError,
    InvalidParameterError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import (
    AuthAclListReply,
    AuthAclReply,
    AuthChangedReply,
    AuthCreateAclRequest,
    AuthCreateUserRequest,
    AuthDeleteAclRequest,
    AuthDeleteUserRequest,
    AuthGetAclRequest,
    AuthGetUserRequest,
    AuthListAclRequest,
    AuthListUserRequest,
    AuthSnapshot,
    AuthSnapshotReply,
    AuthUpdateAclRequest,
    AuthUpdateUserRequest,
    AuthUser,
    AuthUserListReply,
    AuthUserReply,
    GetAuthSnapshotRequest,
)
from ferry.remoting.calls import Caller
from ferry.runtime.acl import AuthDb, AuthFile, edits, model
from ferry.runtime.acl.store import FILE_NAME
from ferry.runtime.security import settings

log = logging.getLogger("ferry.remoting.auth")

InnerKey = Callable[[], Credentials | None]


def wire_digest(digest: str, inner: Credentials | None) -> str:
    """The digest a snapshot is named by on the wire: keyed with the inner secret key when
    there is one, so that a hash of the passwords never travels either."""
    if inner is None:
        return digest
    key = inner.secret_key.encode()
    return hmac.new(key, b"ferry-auth-digest:" + digest.encode(), hashlib.sha256).hexdigest()


def without_password(user: AuthUser) -> AuthUser:
    return msgspec.structs.replace(user, password="")


class AuthAdmin:
    def __init__(
        self,
        config_dir: Path,
        broker_name: str,
        *,
        slave: bool,
        inner: InnerKey = settings.inner_credentials,
    ) -> None:
        self.file = AuthFile(config_dir / FILE_NAME)
        self.db = AuthDb(self.file.load())
        self._broker_name = broker_name
        self._slave = slave
        # the cluster's inner credentials, None with authentication off (read when needed:
        # the process configures its security before serving)
        self._inner = inner
        self._decoder = msgspec.msgpack.Decoder(AuthSnapshot)
        self._encoder = msgspec.msgpack.Encoder()
        # with authentication on: pushes a change to the servers that check users, and
        # calls back with those that did not take it (auth_push.AuthPusher.confirm)
        self.confirm: Callable[[Callable[[list[str]], None]], None] | None = None

    def ensure_init_user(self, init_user: tuple[str, str] | None) -> None:
        """initAuthenticationUser: the Super user made at start when no user has its name.
        A slave makes none: its users are its master's."""
        if init_user is None or self._slave:
            return
        username, password = init_user
        if self.db.user(username) is not None:
            return
        self._change(
            lambda s: edits.create_user(s, AuthUser(username, password, model.SUPER)),
            f"initial Super user {username} created",
        )

    def handlers(self) -> dict[type, Any]:
        """Request type -> handler for the users and ACLs this broker keeps."""
        return {
            AuthCreateUserRequest: self.create_user,
            AuthUpdateUserRequest: self.update_user,
            AuthDeleteUserRequest: self.delete_user,
            AuthGetUserRequest: self.get_user,
            AuthListUserRequest: self.list_users,
            AuthCreateAclRequest: self.create_acl,
            AuthUpdateAclRequest: self.update_acl,
            AuthDeleteAclRequest: self.delete_acl,
            AuthGetAclRequest: self.get_acl,
            AuthListAclRequest: self.list_acls,
            GetAuthSnapshotRequest: self.snapshot,
        }

    # ---- changes ----

    def _change(self, edit: Callable[[AuthSnapshot], AuthSnapshot], what: str) -> AuthChangedReply:
        if self._slave:
            raise ServiceNotAvailableError(
                f"broker {self._broker_name} is a slave; change users and ACLs on its master",
                retriable=False,
            )
        new = edit(self.db.snapshot())
        self._keep(new)
        log.info("%s (auth version %d)", what, new.version)
        return AuthChangedReply(version=new.version)

    def _in_force(self, reply: AuthChangedReply, call: Caller) -> AuthChangedReply | None:
        """The answer to a change: deferred until every name server and controller has it
        (issue 42 §8), naming those that had not got it within the wait."""
        confirm = self.confirm
        if confirm is None:
            return reply

        def done(unconfirmed: list[str]) -> None:
            if unconfirmed:
                log.warning(
                    "auth version %d not yet taken by %s (they get it at the next refresh)",
                    reply.version,
                    ", ".join(unconfirmed),
                )
            call.reply(msgspec.structs.replace(reply, unconfirmed=unconfirmed))

        confirm(done)
        return None

    def _keep(self, snapshot: AuthSnapshot) -> None:
        """Checked, saved, then in force: nothing saved that the AuthDb would refuse."""

        def save(checked: AuthSnapshot) -> None:
            try:
                self.file.save(checked)
            except OSError as exc:
                raise BrokerSystemError(f"cannot save {self.file.path}: {exc}") from None

        self.db.load(snapshot, before=save)

    # ---- passwords: sealed on the wire ----

    def _password(self, username: str, clear: str, sealed: bytes, sealed_by: str) -> str:
        """The password a createUser or updateUser brings ("" when it brings none), unsealed
        with the secret key of sealed_by; typed errors, before anything changes."""
        inner = self._inner()
        if not sealed:
            if clear and inner is not None:
                raise InvalidParameterError(
                    f"authentication is on: the password of user {username} must travel "
                    "sealed (password_sealed), never in clear; nothing changed"
                )
            return clear  # authentication off: no key to seal with
        if clear:
            raise InvalidParameterError(
                f"the password of user {username} is given both in clear and sealed"
            )
        plain = self._unseal_with(sealed_by, inner, sealed)
        if plain is None and inner is None and self.db.user(sealed_by) is None:
            raise BadSignatureError(
                f"the password of user {username} is sealed with the key of {sealed_by!r}, "
                "which this broker does not know: it has authentication off (no inner key); "
                "send the command without credentials, or turn authentication on"
            )
        if plain is None:
            raise BadSignatureError(
                f"the password of user {username} does not unseal with the secret key of "
                f"{sealed_by!r} (it must be sealed with the credentials the request is "
                "signed with); nothing changed"
            )
        try:
            password = plain.decode()
        except UnicodeDecodeError:
            raise InvalidParameterError(f"the password of user {username} is not UTF-8") from None
        if not password:
            raise InvalidParameterError(f"user {username} needs a password")
        return password

    def _unseal_with(
        self, access_key: str, inner: Credentials | None, sealed: bytes
    ) -> bytes | None:
        if not access_key:
            return None
        if inner is not None and access_key == inner.access_key:
            return unseal(inner.secret_key, sealed)
        sealer = self.db.user(access_key)
        return None if sealer is None else unseal(sealer.password, sealed)

    def create_user(self, req: AuthCreateUserRequest, call: Caller) -> AuthChangedReply | None:
        user = req.user
        _sealed_by_signer(req.sealed_by, call)

        def edit(s: AuthSnapshot) -> AuthSnapshot:
            password = self._password(
                user.username, user.password, req.password_sealed, req.sealed_by
            )
            return edits.create_user(s, msgspec.structs.replace(user, password=password))

        return self._in_force(
            self._change(edit, f"user {user.username} created ({user.user_type or model.NORMAL})"),
            call,
        )

    def update_user(self, req: AuthUpdateUserRequest, call: Caller) -> AuthChangedReply | None:
        _sealed_by_signer(req.sealed_by, call)
        new_password = req.password or req.password_sealed
        changed = [
            name
            for name, value in (
                ("password", new_password),
                ("type", req.user_type),
                ("status", req.user_status),
            )
            if value
        ]

        def edit(s: AuthSnapshot) -> AuthSnapshot:
            password = self._password(
                req.username, req.password, req.password_sealed, req.sealed_by
            )
            return edits.update_user(
                s,
                req.username,
                password=password,
                user_type=req.user_type,
                user_status=req.user_status,
            )

        return self._in_force(
            self._change(edit, f"user {req.username} updated ({', '.join(changed) or 'nothing'})"),
            call,
        )

    def delete_user(self, req: AuthDeleteUserRequest, call: Caller) -> AuthChangedReply | None:
        return self._in_force(
            self._change(
                lambda s: edits.delete_user(s, req.username), f"user {req.username} deleted"
            ),
            call,
        )

    def create_acl(self, req: AuthCreateAclRequest, call: Caller) -> AuthChangedReply | None:
        return self._in_force(
            self._change(lambda s: edits.merge_acl(s, req.acl), f"ACL of {req.acl.subject} set"),
            call,
        )

    def update_acl(self, req: AuthUpdateAclRequest, call: Caller) -> AuthChangedReply | None:
        return self._in_force(
            self._change(lambda s: edits.merge_acl(s, req.acl), f"ACL of {req.acl.subject} set"),
            call,
        )

    def delete_acl(self, req: AuthDeleteAclRequest, call: Caller) -> AuthChangedReply | None:
        what = ", ".join(req.resources) if req.resources else "all"
        return self._in_force(
            self._change(
                lambda s: edits.delete_acl(s, req.subject, req.resources),
                f"ACL of {req.subject}: {what} deleted",
            ),
            call,
        )

    # ---- reads ----

    # ---- reads (never a password) ----

    def get_user(self, req: AuthGetUserRequest, _call: Caller) -> AuthUserReply:
        user = edits.get_user(self.db.snapshot(), req.username)
        return AuthUserReply(user=without_password(user))

    def list_users(self, req: AuthListUserRequest, _call: Caller) -> AuthUserListReply:
        users = edits.list_users(self.db.snapshot(), req.filter)
        return AuthUserListReply(users=[without_password(u) for u in users])

    def get_acl(self, req: AuthGetAclRequest, _call: Caller) -> AuthAclReply:
        return AuthAclReply(acl=edits.get_acl(self.db.snapshot(), req.subject))

    def list_acls(self, req: AuthListAclRequest, _call: Caller) -> AuthAclListReply:
        acls = edits.list_acls(self.db.snapshot(), req.subject_filter, req.resource_filter)
        return AuthAclListReply(acls=acls)

    # ---- a slave's copy ----

    def known_digest(self) -> str:
        """What a slave names its copy by when it asks its master (GetAuthSnapshotRequest)."""
        return wire_digest(self.db.digest, self._inner())

    def snapshot(self, req: GetAuthSnapshotRequest, _call: Caller) -> AuthSnapshotReply:
        """The users and ACLs for a slave: sealed with the inner secret key when
        authentication is on, in clear (as every request is) when it is off."""
        db = self.db
        inner = self._inner()
        snap = db.snapshot()
        digest = wire_digest(db.digest, inner)
        if req.known_digest == digest:
            return AuthSnapshotReply(version=snap.version, digest=digest)
        if inner is None:
            return AuthSnapshotReply(version=snap.version, digest=digest, snapshot=snap)
        sealed = seal(inner.secret_key, self._encoder.encode(snap))
        return AuthSnapshotReply(version=snap.version, digest=digest, sealed=sealed)

    def adopt(self, reply: AuthSnapshotReply) -> bool:
        """A slave takes its master's snapshot (saved, then loaded); True when it changed.
        BadSignatureError when it is sealed with another inner key: the old copy stays."""
        inner = self._inner()
        # a clear snapshot (the master has authentication off) is named by the plain digest
        if reply.digest == wire_digest(self.db.digest, inner if reply.sealed else None):
            return False
        snapshot = self._opened(reply, inner)
        if snapshot is None:
            return False
        self._keep(snapshot)
        log.info(
            "users and ACLs copied from the master (auth version %d, %d users)",
            snapshot.version,
            len(snapshot.users),
        )
        return True

    def _opened(self, reply: AuthSnapshotReply, inner: Credentials | None) -> AuthSnapshot | None:
        if not reply.sealed:
            return reply.snapshot  # the master has authentication off
        if inner is None:
            raise BadSignatureError(
                "the master sent its users sealed, and this broker has authentication off: "
                "it has no inner key to open them (set authenticationEnabled and "
                "innerClientAuthenticationCredentials as on the master)"
            )
        plain = unseal(inner.secret_key, reply.sealed)
        if plain is None:
            raise BadSignatureError(
                "the master's users are sealed with another inner secret key: "
                "innerClientAuthenticationCredentials must be the same on master and slave"
            )
        try:
            return self._decoder.decode(plain)
        except msgspec.MsgspecError as exc:
            raise InvalidParameterError(f"the master's users do not decode: {exc}") from None


def _sealed_by_signer(sealed_by: str, call: Caller) -> None:
    """A password is sealed with the key of whoever signed the request, never another's."""
    signer = getattr(call, "signer", "")  # unit tests call handlers without a Caller
    if sealed_by and signer and sealed_by != signer:
        raise BadSignatureError(
            f"the password is sealed with the key of {sealed_by!r}, but the request is signed "
            f"by {signer!r}"
        )
