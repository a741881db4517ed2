"""Changes to users and ACLs, as RocketMQ 5.3's admin commands make them: each takes a
snapshot and returns the next one (version + 1), or raises a typed error and changes nothing.

What is stored is checked and spelled canonically here (`pub` becomes `Pub`, `topic:a`
becomes `Topic:a`), so everything that reads a snapshot may trust it.
"""

from __future__ import annotations

from ferry.protocol.errors import (
    AclNotFoundError,
    InvalidParameterError,
    UserExistAlreadyError,
    UserNotFoundError,
)
from ferry.protocol.messages import AclPolicyEntry, AclRecord, AuthSnapshot, AuthUser
from ferry.runtime.acl import model


def clean_user(user: AuthUser) -> AuthUser:
    model.check_username(user.username)
    if not user.password:
        raise InvalidParameterError(f"user {user.username} needs a password")
    return AuthUser(
        user.username,
        user.password,
        model.user_type(user.user_type or model.NORMAL),
        model.user_status(user.user_status or model.ENABLE),
    )


def clean_entry(entry: AclPolicyEntry) -> AclPolicyEntry:
    pattern = model.parse_pattern(entry.resource)
    actions = model.parse_actions(entry.actions)
    ips = [str(model.parse_source_ip(ip)) for ip in entry.source_ips]
    return AclPolicyEntry(
        resource=pattern.text,
        actions=[a.value for a in actions],
        source_ips=list(dict.fromkeys(ips)),
        decision=model.decision(entry.decision),
    )


def clean_acl(acl: AclRecord) -> AclRecord:
    username = model.subject_user(acl.subject)
    if not acl.entries:
        raise InvalidParameterError(f"the ACL of {acl.subject} names no resource")
    entries: dict[str, AclPolicyEntry] = {}
    for entry in acl.entries:
        clean = clean_entry(entry)
        entries[clean.resource] = clean  # one entry per resource: the last one given
    return AclRecord(model.USER_PREFIX + username, list(entries.values()))


def _user_index(snapshot: AuthSnapshot, username: str) -> int:
    for i, user in enumerate(snapshot.users):
        if user.username == username:
            return i
    raise UserNotFoundError(f"user {username} does not exist")


def _next(snapshot: AuthSnapshot, users: list[AuthUser], acls: list[AclRecord]) -> AuthSnapshot:
    return AuthSnapshot(
        version=snapshot.version + 1,
        users=sorted(users, key=lambda u: u.username),
        acls=sorted(acls, key=lambda a: a.subject),
    )


# ---- users ----


def create_user(snapshot: AuthSnapshot, user: AuthUser) -> AuthSnapshot:
    user = clean_user(user)
    if any(u.username == user.username for u in snapshot.users):
        raise UserExistAlreadyError(f"user {user.username} exists already")
    return _next(snapshot, [*snapshot.users, user], list(snapshot.acls))


def update_user(
    snapshot: AuthSnapshot,
    username: str,
    *,
    password: str = "",
    user_type: str = "",
    user_status: str = "",
) -> AuthSnapshot:
    """Changes what is given (an empty value keeps the user's)."""
    model.check_username(username)
    i = _user_index(snapshot, username)
    old = snapshot.users[i]
    new = AuthUser(
        username,
        password or old.password,
        model.user_type(user_type) if user_type else old.user_type,
        model.user_status(user_status) if user_status else old.user_status,
    )
    users = list(snapshot.users)
    users[i] = new
    return _next(snapshot, users, list(snapshot.acls))


def delete_user(snapshot: AuthSnapshot, username: str) -> AuthSnapshot:
    """The user and its ACL."""
    model.check_username(username)
    i = _user_index(snapshot, username)
    users = [u for j, u in enumerate(snapshot.users) if j != i]
    subject = model.USER_PREFIX + username
    return _next(snapshot, users, [a for a in snapshot.acls if a.subject != subject])


def list_users(snapshot: AuthSnapshot, contains: str = "") -> list[AuthUser]:
    return [u for u in snapshot.users if contains in u.username]


def get_user(snapshot: AuthSnapshot, username: str) -> AuthUser:
    model.check_username(username)
    return snapshot.users[_user_index(snapshot, username)]


# ---- ACLs ----


def find_acl(snapshot: AuthSnapshot, subject: str) -> AclRecord | None:
    return next((a for a in snapshot.acls if a.subject == subject), None)


def merge_acl(snapshot: AuthSnapshot, acl: AclRecord) -> AuthSnapshot:
    """createAcl and updateAcl: the entries join the subject's ACL, each replacing the entry
    of the same resource; the subject's user must exist."""
    acl = clean_acl(acl)
    _user_index(snapshot, model.subject_user(acl.subject))
    old = find_acl(snapshot, acl.subject)
    entries = {e.resource: e for e in (old.entries if old else [])}
    entries.update({e.resource: e for e in acl.entries})
    merged = AclRecord(acl.subject, list(entries.values()))
    acls = [a for a in snapshot.acls if a.subject != acl.subject]
    return _next(snapshot, list(snapshot.users), [*acls, merged])


def _existing_acl(snapshot: AuthSnapshot, subject: str) -> AclRecord:
    """The ACL of an existing user's subject, spelled canonically."""
    username = model.subject_user(subject)
    _user_index(snapshot, username)
    acl = find_acl(snapshot, model.USER_PREFIX + username)
    if acl is None:
        raise AclNotFoundError(f"{model.USER_PREFIX}{username} has no ACL")
    return acl


def delete_acl(snapshot: AuthSnapshot, subject: str, resources: list[str]) -> AuthSnapshot:
    """The entries of `resources` (none given: the whole ACL); an ACL left empty goes."""
    old = _existing_acl(snapshot, subject)
    subject = old.subject
    dropped = {model.parse_pattern(r).text for r in resources}
    kept = [e for e in old.entries if e.resource not in dropped] if dropped else []
    acls = [a for a in snapshot.acls if a.subject != subject]
    if kept:
        acls.append(AclRecord(subject, kept))
    return _next(snapshot, list(snapshot.users), acls)


def get_acl(snapshot: AuthSnapshot, subject: str) -> AclRecord:
    return _existing_acl(snapshot, subject)


def list_acls(snapshot: AuthSnapshot, subject: str = "", resource: str = "") -> list[AclRecord]:
    """ACLs whose subject contains `subject`, keeping the entries whose resource contains
    `resource` (an ACL with none left is not listed)."""
    out: list[AclRecord] = []
    for acl in snapshot.acls:
        if subject not in acl.subject:
            continue
        entries = [e for e in acl.entries if resource in e.resource]
        if entries:
            out.append(AclRecord(acl.subject, entries))
    return out


def check_snapshot(snapshot: AuthSnapshot) -> AuthSnapshot:
    """A snapshot from a file or a master, checked as the edits check theirs; InvalidParameter
    naming the first thing wrong."""
    users = [clean_user(u) for u in snapshot.users]
    acls = [clean_acl(a) for a in snapshot.acls]
    if len({u.username for u in users}) != len(users):
        raise InvalidParameterError("a user is listed twice")
    if len({a.subject for a in acls}) != len(acls):
        raise InvalidParameterError("a subject has two ACLs")
    return AuthSnapshot(version=snapshot.version, users=users, acls=acls)
