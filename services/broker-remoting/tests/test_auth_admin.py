"""Remoting's users and ACLs (auth_admin.py) on real files: the initial Super user, changes
saved before they are answered, a save that fails changing nothing, and a slave's copy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol.auth import Credentials, seal
from ferry.protocol.errors import (
    BadSignatureError,
    BrokerSystemError,
    InvalidParameterError,
    ServiceNotAvailableError,
)
from ferry.protocol.messages import (
    AclPolicyEntry,
    AclRecord,
    AuthCreateAclRequest,
    AuthCreateUserRequest,
    AuthGetUserRequest,
    AuthListUserRequest,
    AuthUpdateUserRequest,
    AuthUser,
    GetAuthSnapshotRequest,
)
from ferry.remoting.auth_admin import AuthAdmin
from ferry.runtime.acl import Action, Resource

CALL: Any = None  # the handlers answer by returning; they never touch the call
INNER = Credentials("ferry-inner", "inner-secret-1")


def test_the_initial_user_is_made_once_and_never_reset(tmp_path: Path) -> None:
    admin = AuthAdmin(tmp_path, "broker-a", slave=False)
    admin.ensure_init_user(("root", "pw-1"))
    assert admin.db.user("root") == AuthUser("root", "pw-1", "Super", "enable")
    admin.update_user(AuthUpdateUserRequest("root", password="pw-2"), CALL)
    again = AuthAdmin(tmp_path, "broker-a", slave=False)  # a restart with the same key
    again.ensure_init_user(("root", "pw-1"))
    assert again.db.user("root") == AuthUser("root", "pw-2", "Super", "enable")
    assert again.db.version == 2
    slave = AuthAdmin(tmp_path / "slave", "broker-a", slave=True)
    slave.ensure_init_user(("root", "pw-1"))  # a slave's users are its master's
    assert slave.db.user("root") is None


def test_a_change_is_on_disk_when_answered_and_a_failed_save_changes_nothing(
    tmp_path: Path,
) -> None:
    admin = AuthAdmin(tmp_path, "broker-a", slave=False)
    reply = admin.create_user(AuthCreateUserRequest(AuthUser("alice", "pw")), CALL)
    assert reply is not None and reply.version == 1
    assert json.loads((tmp_path / "auth.json").read_text())["users"] == [
        {"username": "alice", "password": "pw"}
    ]
    (tmp_path / "auth.json.tmp").mkdir()  # the temporary file cannot be written
    with pytest.raises(BrokerSystemError, match="cannot save"):
        admin.create_user(AuthCreateUserRequest(AuthUser("bob", "pw")), CALL)
    assert admin.db.user("bob") is None and admin.db.version == 1
    assert AuthAdmin(tmp_path, "broker-a", slave=False).db.user("bob") is None


def test_a_slave_refuses_changes_and_takes_its_master_s_copy_by_digest(tmp_path: Path) -> None:
    master = AuthAdmin(tmp_path / "m", "broker-a", slave=False)
    master.create_user(AuthCreateUserRequest(AuthUser("alice", "pw")), CALL)
    entry = AclPolicyEntry(resource="Topic:orders", actions=["Pub"], decision="Allow")
    master.create_acl(AuthCreateAclRequest(AclRecord("User:alice", [entry])), CALL)
    slave = AuthAdmin(tmp_path / "s", "broker-a", slave=True)
    with pytest.raises(ServiceNotAvailableError, match="slave") as refused:
        slave.create_user(AuthCreateUserRequest(AuthUser("bob", "pw")), CALL)
    assert not refused.value.retriable
    assert not (tmp_path / "s" / "auth.json").exists()

    reply = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.db.digest), CALL)
    assert reply.snapshot is not None
    assert slave.adopt(reply)
    orders = Resource.topic("orders")
    assert slave.db.authorize("alice", orders, Action.PUB, "127.0.0.1") is None
    assert AuthAdmin(tmp_path / "s", "broker-a", slave=True).db.digest == master.db.digest
    # nothing new: the master sends no snapshot, and the slave keeps what it has
    unchanged = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.db.digest), CALL)
    assert unchanged.snapshot is None and not slave.adopt(unchanged)


def test_with_authentication_on_passwords_come_sealed_and_go_out_never(tmp_path: Path) -> None:
    admin = AuthAdmin(tmp_path, "broker-a", slave=False, inner=lambda: INNER)
    admin.ensure_init_user(("root", "root-pw"))
    sealed = seal(INNER.secret_key, b"alice-pw")
    admin.create_user(AuthCreateUserRequest(AuthUser("alice"), sealed, INNER.access_key), CALL)
    assert admin.db.user("alice") == AuthUser("alice", "alice-pw", "Normal", "enable")
    # sealed with a user's password (the Admin signing as root)
    by_root = seal("root-pw", b"alice-pw-2")
    admin.update_user(
        AuthUpdateUserRequest("alice", password_sealed=by_root, sealed_by="root"), CALL
    )
    assert admin.db.user("alice") == AuthUser("alice", "alice-pw-2", "Normal", "enable")
    before = admin.db.version
    refusals = [
        (AuthCreateUserRequest(AuthUser("bob", "clear-pw")), InvalidParameterError, "sealed"),
        (
            AuthCreateUserRequest(AuthUser("bob"), seal("wrong", b"pw"), "root"),
            BadSignatureError,
            "does not unseal",
        ),
        (
            AuthCreateUserRequest(AuthUser("bob"), seal("root-pw", b"pw"), "nobody"),
            BadSignatureError,
            "does not unseal",
        ),
        (
            AuthCreateUserRequest(AuthUser("bob", "pw"), seal("root-pw", b"pw"), "root"),
            InvalidParameterError,
            "both",
        ),
    ]
    for req, error, text in refusals:
        with pytest.raises(error, match=text):
            admin.create_user(req, CALL)
    with pytest.raises(BadSignatureError):
        admin.update_user(
            AuthUpdateUserRequest("alice", password_sealed=b"x" * 64, sealed_by="root"), CALL
        )
    assert admin.db.version == before and admin.db.user("bob") is None
    assert admin.db.user("alice") == AuthUser("alice", "alice-pw-2", "Normal", "enable")
    assert admin.get_user(AuthGetUserRequest("alice"), CALL).user == AuthUser("alice")
    listed = admin.list_users(AuthListUserRequest(), CALL).users
    assert {u.username for u in listed} == {"alice", "root"}
    assert all(u.password == "" for u in listed)


def test_with_authentication_off_a_clear_password_is_taken(tmp_path: Path) -> None:
    admin = AuthAdmin(tmp_path, "broker-a", slave=False, inner=lambda: None)
    admin.create_user(AuthCreateUserRequest(AuthUser("alice", "pw")), CALL)
    assert admin.db.user("alice") == AuthUser("alice", "pw", "Normal", "enable")
    # a seal by a known user opens; by a key this broker cannot know, a clear refusal
    by_alice = seal("pw", b"bob-pw")
    admin.create_user(AuthCreateUserRequest(AuthUser("bob"), by_alice, "alice"), CALL)
    assert admin.db.user("bob") == AuthUser("bob", "bob-pw", "Normal", "enable")
    with pytest.raises(BadSignatureError, match="authentication off"):
        admin.create_user(AuthCreateUserRequest(AuthUser("carol"), by_alice, "inner"), CALL)
    assert admin.db.user("carol") is None


def test_the_slave_s_copy_travels_sealed_and_another_inner_key_keeps_the_old(
    tmp_path: Path,
) -> None:
    master = AuthAdmin(tmp_path / "m", "broker-a", slave=False, inner=lambda: INNER)
    master.ensure_init_user(("root", "root-pw"))
    slave = AuthAdmin(tmp_path / "s", "broker-a", slave=True, inner=lambda: INNER)
    reply = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.known_digest()), CALL)
    assert reply.snapshot is None and reply.sealed
    assert b"root-pw" not in reply.sealed
    assert reply.digest != master.db.digest  # keyed: not a plain hash of the passwords
    assert slave.adopt(reply)
    assert slave.db.user("root") == AuthUser("root", "root-pw", "Super", "enable")
    unchanged = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.known_digest()), CALL)
    assert not unchanged.sealed and not slave.adopt(unchanged)

    master.create_user(
        AuthCreateUserRequest(AuthUser("alice"), seal("root-pw", b"a-pw"), "root"), CALL
    )
    other = Credentials(INNER.access_key, "another-inner-secret")
    stranger = AuthAdmin(tmp_path / "s", "broker-a", slave=True, inner=lambda: other)
    sealed = master.snapshot(GetAuthSnapshotRequest(known_digest=stranger.known_digest()), CALL)
    with pytest.raises(BadSignatureError, match="innerClientAuthenticationCredentials"):
        stranger.adopt(sealed)
    assert stranger.db.user("alice") is None and stranger.db.user("root") is not None
    off = AuthAdmin(tmp_path / "s", "broker-a", slave=True, inner=lambda: None)
    with pytest.raises(BadSignatureError, match="authentication off"):
        off.adopt(sealed)


def test_a_slave_with_authentication_takes_a_clear_copy_once(tmp_path: Path) -> None:
    """A master with authentication off sends in clear (named by the plain digest): a slave
    with it on takes the copy, and does not save it again at every sync."""
    master = AuthAdmin(tmp_path / "m", "broker-a", slave=False, inner=lambda: None)
    master.create_user(AuthCreateUserRequest(AuthUser("alice", "pw")), CALL)
    slave = AuthAdmin(tmp_path / "s", "broker-a", slave=True, inner=lambda: INNER)
    reply = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.known_digest()), CALL)
    assert reply.snapshot is not None and not reply.sealed
    assert slave.adopt(reply)
    again = master.snapshot(GetAuthSnapshotRequest(known_digest=slave.known_digest()), CALL)
    assert not slave.adopt(again)
