"""Changes to users and ACLs (createUser ... deleteAcl) and their file: typed refusals that
change nothing, versions, merges by resource, and what survives a reload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.protocol.errors import (
    AclNotFoundError,
    InvalidParameterError,
    UserExistAlreadyError,
    UserNotFoundError,
)
from ferry.protocol.messages import AclPolicyEntry, AclRecord, AuthSnapshot, AuthUser
from ferry.runtime.acl import Action, AuthDb, AuthFile, Resource, edits
from ferry.runtime.files import StateFileError

EMPTY = AuthSnapshot()


def entry(resource: str, actions: list[str], decision: str = "Allow") -> AclPolicyEntry:
    return AclPolicyEntry(resource=resource, actions=actions, decision=decision)


def with_alice() -> AuthSnapshot:
    return edits.create_user(EMPTY, AuthUser("alice", "pw1"))


def test_users_are_created_updated_and_deleted_with_their_acl() -> None:
    snap = with_alice()
    assert snap.version == 1
    assert snap.users == [AuthUser("alice", "pw1", "Normal", "enable")]
    with pytest.raises(UserExistAlreadyError):
        edits.create_user(snap, AuthUser("alice", "other"))
    snap = edits.update_user(snap, "alice", user_status="DISABLE")
    assert edits.get_user(snap, "alice") == AuthUser("alice", "pw1", "Normal", "disable")
    snap = edits.update_user(snap, "alice", password="pw2", user_type="super")
    assert edits.get_user(snap, "alice") == AuthUser("alice", "pw2", "Super", "disable")
    snap = edits.merge_acl(snap, AclRecord("User:alice", [entry("Topic:a", ["Pub"])]))
    snap = edits.delete_user(snap, "alice")
    assert (snap.users, snap.acls, snap.version) == ([], [], 5)
    for change in (
        lambda: edits.update_user(snap, "alice", password="x"),
        lambda: edits.delete_user(snap, "alice"),
        lambda: edits.get_user(snap, "alice"),
    ):
        with pytest.raises(UserNotFoundError):
            change()


def test_acls_merge_by_resource_and_lose_entries_one_by_one() -> None:
    snap = with_alice()
    with pytest.raises(UserNotFoundError):  # the subject's user must exist
        edits.merge_acl(snap, AclRecord("User:bob", [entry("Topic:a", ["Pub"])]))
    snap = edits.merge_acl(
        snap, AclRecord("User:alice", [entry("Topic:a", ["Pub"]), entry("Group:g", ["Sub"])])
    )
    snap = edits.merge_acl(snap, AclRecord("User:alice", [entry("Topic:a", ["Sub"], "Deny")]))
    acl = edits.get_acl(snap, "User:alice")
    assert {e.resource: (e.actions, e.decision) for e in acl.entries} == {
        "Topic:a": (["Sub"], "Deny"),
        "Group:g": (["Sub"], "Allow"),
    }
    assert edits.list_acls(snap, "alice", "Group") == [
        AclRecord("User:alice", [entry("Group:g", ["Sub"])])
    ]
    assert edits.list_acls(snap, "bob") == []
    snap = edits.delete_acl(snap, "User:alice", ["topic:a"])
    assert [e.resource for e in edits.get_acl(snap, "User:alice").entries] == ["Group:g"]
    snap = edits.delete_acl(snap, "User:alice", ["Group:g"])  # its last entry: the ACL goes
    with pytest.raises(AclNotFoundError):
        edits.get_acl(snap, "User:alice")
    with pytest.raises(AclNotFoundError):
        edits.delete_acl(snap, "User:alice", [])


@pytest.mark.parametrize(
    "change",
    [
        lambda s: edits.create_user(s, AuthUser("", "pw")),
        lambda s: edits.create_user(s, AuthUser("bob", "")),
        lambda s: edits.create_user(s, AuthUser("b ob", "pw")),
        lambda s: edits.create_user(s, AuthUser("bob", "pw", "Admin")),
        lambda s: edits.create_user(s, AuthUser("bob", "pw", "Normal", "paused")),
        lambda s: edits.update_user(s, "alice", user_type="root"),
        lambda s: edits.merge_acl(s, AclRecord("Group:alice", [entry("Topic:a", ["Pub"])])),
        lambda s: edits.merge_acl(s, AclRecord("User:alice", [])),
        lambda s: edits.merge_acl(s, AclRecord("User:alice", [entry("Topic:a", ["Fly"])])),
        lambda s: edits.merge_acl(s, AclRecord("User:alice", [entry("Topic:a", [])])),
        lambda s: edits.merge_acl(s, AclRecord("User:alice", [entry("Topic:a", ["Pub"], "No")])),
        lambda s: edits.merge_acl(s, AclRecord("User:alice", [entry("Queue:a", ["Pub"])])),
        lambda s: edits.merge_acl(
            s,
            AclRecord(
                "User:alice",
                [
                    AclPolicyEntry(
                        resource="Topic:a",
                        actions=["Pub"],
                        decision="Allow",
                        source_ips=["300.1.1.1"],
                    )
                ],
            ),
        ),
        lambda s: edits.delete_acl(s, "alice", []),
    ],
)
def test_bad_input_is_refused_with_invalid_parameter(change) -> None:  # type: ignore[no-untyped-def]
    snap = with_alice()
    with pytest.raises(InvalidParameterError):
        change(snap)


def test_the_file_keeps_everything_over_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "config" / "auth.json"
    store = AuthFile(path)
    assert store.load() == AuthSnapshot()  # no file yet
    snap = edits.merge_acl(
        with_alice(),
        AclRecord(
            "User:alice",
            [
                AclPolicyEntry(
                    resource="Topic:o*",
                    actions=["Pub"],
                    decision="Allow",
                    source_ips=["10.0.0.0/8"],
                )
            ],
        ),
    )
    store.save(snap)
    assert not list(path.parent.glob("*.tmp"))
    again = AuthFile(path).load()
    assert again == snap
    db = AuthDb(again)
    assert db.version == 2
    assert db.authorize("alice", Resource.topic("orders"), Action.PUB, "10.1.1.1") is None
    assert db.authorize("alice", Resource.topic("orders"), Action.PUB, "11.1.1.1") is not None


def test_a_damaged_file_is_refused_not_emptied(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text("{not json")
    with pytest.raises(StateFileError):
        AuthFile(path).load()
    path.write_text(
        json.dumps(
            {"version": 3, "users": [{"username": "a", "password": "p", "user_type": "Boss"}]}
        )
    )
    with pytest.raises(StateFileError, match="user type"):
        AuthFile(path).load()
