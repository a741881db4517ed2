"""ACL 2.0's admin commands against real clusters: `ferry admin createUser ... listAcl` in a
subprocess with stdout a pipe, their effect on the broker's config/auth.json, typed refusals
that change nothing, initAuthenticationUser, a restart, and a slave copying its master's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ha_support import start_pair
from itest_support import FERRY, Cluster, start_cluster, wait_for

from ferry.admin import Admin
from ferry.protocol.errors import AclNotFoundError, ServiceNotAvailableError, UserNotFoundError
from ferry.runtime.testing.cluster import running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

INIT_USER = '{"username":"root","password":"root-secret-1"}'
SECRETS = ("root-secret-1", "alice-secret-1", "alice-secret-2")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(
        tmp_path_factory.mktemp("acl"), overrides={"initAuthenticationUser": INIT_USER}
    ) as c:
        yield c


def ferry_admin(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`ferry admin <args> | cat`: stdout a pipe; no secret in what it prints."""
    done = subprocess.run(
        [FERRY, "admin", *args, "-n", cluster.namesrv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    for secret in SECRETS:
        assert secret not in done.stdout + done.stderr
    return done


def ok(cluster: Cluster, *args: str) -> str:
    done = ferry_admin(cluster, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(ok(cluster, *args, "--json"))


def auth_file(cluster: Cluster) -> dict[str, Any]:
    return json.loads((cluster.dir / "broker-a" / "config" / "auth.json").read_text())  # type: ignore[no-any-return]


def test_the_initial_user_is_a_super_user_and_its_password_is_never_shown(
    cluster: Cluster,
) -> None:
    out = ok(cluster, "getUser", "-u", "root")
    lines = out.splitlines()
    assert any(ln.split()[1:] == ["root", "Super", "enable"] for ln in lines), out
    kept = auth_file(cluster)
    assert {"username": "root", "password": "root-secret-1", "user_type": "Super"} in kept["users"]
    # getBrokerConfig says the key is set, never its value
    assert (
        as_json(cluster, "getBrokerConfig", "-b", cluster.broker_addr)[cluster.broker_addr][
            "initAuthenticationUser"
        ]
        == "(hidden)"
    )
    assert as_json(cluster, "listUser", "-f", "roo") == [
        {
            "broker": cluster.broker_addr,
            "username": "root",
            "userType": "Super",
            "userStatus": "enable",
        }
    ]


def test_users_and_acls_through_the_cli(cluster: Cluster) -> None:
    broker = cluster.broker_addr
    out = ok(cluster, "createUser", "-u", "alice", "-p", "alice-secret-1", "-t", "Normal")
    assert broker in out
    ok(cluster, "updateUser", "-u", "alice", "-p", "alice-secret-2", "-s", "disable")
    assert as_json(cluster, "getUser", "-u", "alice", "-b", broker) == [
        {"broker": broker, "username": "alice", "userType": "Normal", "userStatus": "disable"}
    ]
    assert {"username": "alice", "password": "alice-secret-2", "user_status": "disable"} in (
        auth_file(cluster)["users"]
    )
    ok(
        cluster,
        "createAcl",
        "-s",
        "User:alice",
        "-r",
        "Topic:orders,Group:g",
        "-a",
        "Pub,Sub",
        "-d",
        "Allow",
        "-i",
        "10.0.0.0/8,127.0.0.1",
    )
    ok(
        cluster,
        "updateAcl",
        "-s",
        "User:alice",
        "-r",
        "Topic:pay*",
        "-a",
        "all",
        "-d",
        "deny",
        "-c",
        "DefaultCluster",
    )
    rows = as_json(cluster, "getAcl", "-s", "User:alice")
    assert {(r["resource"], tuple(r["actions"]), r["decision"]) for r in rows} == {
        ("Topic:orders", ("Pub", "Sub"), "Allow"),
        ("Group:g", ("Pub", "Sub"), "Allow"),
        ("Topic:pay*", ("All",), "Deny"),
    }
    assert rows[0]["sourceIps"] == ["10.0.0.0/8", "127.0.0.1/32"]
    # the table through a pipe: one entry per line, the resource whole on it
    table = ok(cluster, "listAcl", "-r", "pay")
    assert [ln for ln in table.splitlines() if "Topic:pay*" in ln and "Deny" in ln], table
    assert "Topic:orders" not in table
    ok(cluster, "deleteAcl", "-s", "User:alice", "-r", "Topic:pay*")
    assert {r["resource"] for r in as_json(cluster, "listAcl", "-s", "alice")} == {
        "Topic:orders",
        "Group:g",
    }
    ok(cluster, "deleteUser", "-u", "alice")
    kept = auth_file(cluster)
    assert [u["username"] for u in kept["users"]] == ["root"]
    assert kept.get("acls", []) == []  # the user's ACL went with it


def test_refusals_are_typed_and_change_nothing(cluster: Cluster) -> None:
    ok(cluster, "createUser", "-u", "bob", "-p", "bob-pw")
    before = auth_file(cluster)
    again = ferry_admin(cluster, "createUser", "-u", "bob", "-p", "other")
    assert again.returncode == 1 and "USER_EXIST_ALREADY" in again.stderr, again.stderr
    missing = ferry_admin(cluster, "getUser", "-u", "nobody")
    assert missing.returncode == 3 and "nobody" in missing.stderr, missing.stderr
    no_acl = ferry_admin(cluster, "getAcl", "-s", "User:bob")
    assert no_acl.returncode == 3 and "has no ACL" in no_acl.stderr, no_acl.stderr
    for bad in (
        ["createAcl", "-s", "User:bob", "-r", "Topic:a", "-a", "Publish", "-d", "Allow"],
        ["createAcl", "-s", "User:bob", "-r", "Queue:a", "-a", "Pub", "-d", "Allow"],
        ["createAcl", "-s", "User:bob", "-r", "Topic:a", "-a", "Pub", "-d", "Perhaps"],
        [
            "createAcl",
            "-s",
            "User:bob",
            "-r",
            "Topic:a",
            "-a",
            "Pub",
            "-d",
            "Allow",
            "-i",
            "10.0.0.0/40",
        ],
        ["createAcl", "-s", "bob", "-r", "Topic:a", "-a", "Pub", "-d", "Allow"],
        ["createUser", "-u", "carol", "-p", "pw", "-t", "Admin"],
        ["updateUser", "-u", "bob", "-s", "paused"],
    ):
        done = ferry_admin(cluster, *bad)
        assert done.returncode == 2 and "INVALID_PARAMETER" in done.stderr, (bad, done.stderr)
    ghost = ferry_admin(
        cluster, "createAcl", "-s", "User:ghost", "-r", "Topic:a", "-a", "Pub", "-d", "Allow"
    )
    assert ghost.returncode == 3 and "ghost" in ghost.stderr, ghost.stderr
    assert auth_file(cluster) == before


def test_users_survive_a_restart_and_the_initial_user_is_not_reset(tmp_path: Path) -> None:
    c = start_cluster(tmp_path, overrides={"initAuthenticationUser": INIT_USER})
    try:
        with Admin(c.namesrv) as admin:
            admin.update_user("root", password="changed-pw")
            admin.create_user("dave", "dave-pw", cluster="DefaultCluster")
            admin.create_acl("User:dave", ["Topic:t*"], ["Pub"], "Allow")
        c.restart_broker()
        with Admin(c.namesrv) as admin:
            users = admin.list_users(broker_addr=c.broker_addr)[c.broker_addr]
            acl = admin.get_acl("User:dave")[c.broker_addr]
        # brokers never send passwords: the kept file has them
        assert {(u.username, u.password, u.user_type) for u in users} == {
            ("root", "", "Super"),
            ("dave", "", "Normal"),
        }
        kept = {u["username"]: u["password"] for u in auth_file(c)["users"]}
        assert kept == {"root": "changed-pw", "dave": "dave-pw"}
        assert [(e.resource, e.actions) for e in acl.entries] == [("Topic:t*", ["Pub"])]
    finally:
        c.local.stop()


def test_a_slave_copies_its_master_s_users_and_refuses_changes(tmp_path: Path) -> None:
    pair = start_pair(tmp_path)
    try:
        slave = pair.slave.broker_addr
        with Admin(pair.namesrv) as admin:
            admin.create_user("erin", "erin-pw", "Super")  # every master: the slave's only
            admin.create_acl("User:erin", ["Group:g"], ["Sub"], "Allow")

            def on_slave() -> bool:
                try:
                    acl = admin.get_acl("User:erin", broker_addr=slave)[slave]
                except (UserNotFoundError, AclNotFoundError):  # not synced yet
                    return False
                return [e.resource for e in acl.entries] == ["Group:g"]

            wait_for(on_slave, 30, "erin and her ACL on the slave")
            assert admin.get_user("erin", broker_addr=slave)[slave].user_type == "Super"
            with pytest.raises(ServiceNotAvailableError, match="slave"):
                admin.create_user("frank", "pw", broker_addr=slave)
            assert "frank" not in {u.username for u in admin.list_users(broker_addr=slave)[slave]}
            admin.delete_user("erin")

            def gone() -> bool:
                return not admin.list_users("erin", broker_addr=slave)[slave]

            wait_for(gone, 30, "erin deleted on the slave too")
        kept = json.loads((tmp_path / "broker-a-s" / "config" / "auth.json").read_text())
        assert kept["version"] == 3  # the master's: create, ACL, delete
    finally:
        pair.close()
