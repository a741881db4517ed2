"""Users and ACLs (RocketMQ 5.3's ACL 2.0): mqadmin's createUser ... listAcl, asked of a
broker's remoting, and the whole of it as one snapshot (slaves copy their master's).

Names are spelled as RocketMQ spells them on the command line: user types `Super` and
`Normal`, statuses `enable` and `disable`, subjects `User:NAME`, resources `Topic:orders`,
`Topic:ord*` (a prefix), `Group:g`, `Cluster:DefaultCluster`, `Cluster` or `*`, actions `Pub`,
`Sub`, `Create`, `Update`, `Delete`, `Get`, `List`, `All`, decisions `Allow` and `Deny`.
The broker checks them (ferry.runtime.acl) and answers INVALID_PARAMETER for anything else.

No password crosses the wire in clear (issue 27): createUser and updateUser carry the new
password sealed (ferry.protocol.auth.seal) with the secret key of the access key that sealed
it (`sealed_by`, the credentials the admin signs with), the snapshot a slave copies travels
sealed with the cluster's inner secret key, and getUser / listUser answer without passwords.
Only a broker with authentication off, where no key exists, takes a password in clear.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from ferry.protocol.codes import RequestCode
from ferry.protocol.messages.common import Reply, Request


class AuthUser(msgspec.Struct, frozen=True, omit_defaults=True):
    """A user. The password is the secret key its clients sign requests with: empty in what
    brokers answer (getUser, listUser) and in what a sealed createUser sends."""

    username: str
    password: str = ""
    user_type: str = "Normal"  # Super | Normal
    user_status: str = "enable"  # enable | disable


class AclPolicyEntry(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """One resource's rule: the actions allowed or denied on it, from source_ips (CIDRs or
    addresses; empty: from anywhere)."""

    resource: str
    actions: list[str]
    source_ips: list[str] = []
    decision: str  # Allow | Deny


class AclRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """A subject's policy: at most one entry per resource."""

    subject: str  # User:NAME
    entries: list[AclPolicyEntry] = []


class AuthSnapshot(msgspec.Struct, frozen=True, omit_defaults=True):
    """Every user and ACL of a broker; version grows by one with each change."""

    version: int = 0
    users: list[AuthUser] = []
    acls: list[AclRecord] = []


# ---- users ----------------------------------------------------------------------------------


class AuthCreateUserRequest(Request, frozen=True, tag="auth_create_user"):
    """password_sealed: seal(secret key of sealed_by, password), with user.password empty.
    A broker with authentication on refuses a password in clear (user.password)."""

    code = RequestCode.AUTH_CREATE_USER
    user: AuthUser
    password_sealed: bytes = b""
    sealed_by: str = ""  # the access key whose secret key sealed the password


class AuthUpdateUserRequest(Request, frozen=True, tag="auth_update_user"):
    """Changes what is given; an empty field keeps the user's value. A new password travels
    as in AuthCreateUserRequest: password_sealed and sealed_by, `password` empty."""

    code = RequestCode.AUTH_UPDATE_USER
    username: str
    password: str = ""
    user_type: str = ""
    user_status: str = ""
    password_sealed: bytes = b""
    sealed_by: str = ""


class AuthDeleteUserRequest(Request, frozen=True, tag="auth_delete_user"):
    """Deletes the user and its ACL."""

    code = RequestCode.AUTH_DELETE_USER
    username: str


class AuthGetUserRequest(Request, frozen=True, tag="auth_get_user"):
    code = RequestCode.AUTH_GET_USER
    username: str


class AuthListUserRequest(Request, frozen=True, tag="auth_list_user"):
    """Users whose name contains `filter` (empty: all)."""

    code = RequestCode.AUTH_LIST_USER
    filter: str = ""


class AuthUserReply(Reply, frozen=True, tag="auth_user"):
    """The user without its password (always empty)."""

    user: AuthUser


class AuthUserListReply(Reply, frozen=True, tag="auth_users"):
    """The users without their passwords (always empty)."""

    users: list[AuthUser] = []


# ---- ACLs -----------------------------------------------------------------------------------


class AuthCreateAclRequest(Request, frozen=True, tag="auth_create_acl"):
    """Adds the entries to the subject's ACL (an entry for a resource it already has replaces
    that one); the subject's user must exist."""

    code = RequestCode.AUTH_CREATE_ACL
    acl: AclRecord


class AuthUpdateAclRequest(Request, frozen=True, tag="auth_update_acl"):
    """As create: RocketMQ's updateAcl merges by resource the same way."""

    code = RequestCode.AUTH_UPDATE_ACL
    acl: AclRecord


class AuthDeleteAclRequest(Request, frozen=True, tag="auth_delete_acl"):
    """Deletes the entries of `resources` (empty: the whole ACL); an ACL left with no entry
    is deleted."""

    code = RequestCode.AUTH_DELETE_ACL
    subject: str
    resources: list[str] = []


class AuthGetAclRequest(Request, frozen=True, tag="auth_get_acl"):
    code = RequestCode.AUTH_GET_ACL
    subject: str


class AuthListAclRequest(Request, frozen=True, tag="auth_list_acl"):
    """ACLs whose subject contains subject_filter, with only their entries whose resource
    contains resource_filter (empty filters: everything)."""

    code = RequestCode.AUTH_LIST_ACL
    subject_filter: str = ""
    resource_filter: str = ""


class AuthAclReply(Reply, frozen=True, tag="auth_acl"):
    acl: AclRecord


class AuthAclListReply(Reply, frozen=True, tag="auth_acls"):
    acls: list[AclRecord] = []


class AuthChangedReply(Reply, frozen=True, tag="auth_changed"):
    """A change is saved: the broker's users and ACLs are now at `version`. unconfirmed: the
    servers that check users (name servers, controllers) which had not taken the change when
    the broker answered (empty: it is in force everywhere)."""

    version: int
    unconfirmed: list[str] = []


# ---- the whole of it (a slave's sync) -------------------------------------------------------


class GetAuthSnapshotRequest(Request, frozen=True, tag="get_auth_snapshot"):
    """Every user and ACL, passwords included: asked by a slave's remoting of its master's.
    known_digest: the digest of the asker's copy (as AuthSnapshotReply.digest); an unchanged
    snapshot is not sent again."""

    code = RequestCode.GET_AUTH_SNAPSHOT
    known_digest: str = ""


class AuthSnapshotReply(Reply, frozen=True, tag="auth_snapshot"):
    """With authentication on: `sealed` is seal(inner secret key, msgpack AuthSnapshot) and
    `snapshot` None; digest is HMAC-SHA256(inner secret key, SHA-256 of that msgpack) (hex),
    so that not even a hash of the passwords travels. Off: `snapshot` in clear and digest the
    SHA-256 (hex). Neither is sent when digest is the asker's known_digest (nothing changed)."""

    version: int
    digest: str
    snapshot: AuthSnapshot | None = None
    sealed: bytes = b""


# this role's requests and replies: AnyRequest and AnyReply (the package) join them
AuthRequest: TypeAlias = (
    AuthCreateUserRequest
    | AuthUpdateUserRequest
    | AuthDeleteUserRequest
    | AuthGetUserRequest
    | AuthListUserRequest
    | AuthCreateAclRequest
    | AuthUpdateAclRequest
    | AuthDeleteAclRequest
    | AuthGetAclRequest
    | AuthListAclRequest
    | GetAuthSnapshotRequest
)

AuthReply: TypeAlias = (
    AuthUserReply
    | AuthUserListReply
    | AuthAclReply
    | AuthAclListReply
    | AuthChangedReply
    | AuthSnapshotReply
)
