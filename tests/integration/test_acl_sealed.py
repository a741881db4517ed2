"""No password crosses the wire in clear (issue 27), with encryption off, on real processes:
createUser / updateUser carry the password sealed with the admin's secret key (and the user
made can sign), a wrong seal or a clear password is refused and changes nothing, getUser and
listUser answer without passwords, and a slave copies its master's users sealed with the inner
key. What crosses the wire is checked on the protocol: the request the SDK builds, and the
replies a BlockingClient gets."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from ha_support import HA_FAST
from itest_support import FERRY, wait_for
from security_support import INNER, ROOT, SECURITY, SecureCluster, start_secure

from ferry.admin import Admin
from ferry.client import Credentials, Message, Producer
from ferry.protocol.auth import seal, unseal
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import (
    AnyRequest,
    AuthCreateUserRequest,
    AuthGetUserRequest,
    AuthListUserRequest,
    AuthSnapshot,
    AuthSnapshotReply,
    AuthUpdateUserRequest,
    AuthUser,
    AuthUserListReply,
    AuthUserReply,
    ClusterInfoReply,
    ErrorReply,
    GetAuthSnapshotRequest,
    GetClusterInfoRequest,
    GetRouteInfoRequest,
)
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.launcher import add_slave_group, start_local_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOPIC = "sealed"
GINA = Credentials("gina", "gina-secret-0123")
GINA_2 = Credentials("gina", "gina-secret-4567")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    c = start_secure(Path(tmp_path_factory.mktemp("sealed")))
    try:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, 1, 1, broker_addr=c.cluster.broker_addr)
        yield c
    finally:
        c.stop()


def ask(endpoint: str, body: AnyRequest, creds: Credentials) -> Any:
    if "://" not in endpoint:
        endpoint = f"tcp://{endpoint}"
    with BlockingClient(endpoint, credentials=creds) as client:
        answer = client.call(body, 5000)
    assert answer is not None, f"{type(body).__name__}: no answer from {endpoint}"
    return answer[0]


def auth_file(broker_dir: Path) -> dict[str, Any]:
    return json.loads((broker_dir / "config" / "auth.json").read_text())  # type: ignore[no-any-return]


def can_route(namesrv: str, creds: Credentials) -> bool:
    return not isinstance(ask(namesrv, GetRouteInfoRequest(TOPIC), creds), ErrorReply)


def sends(c: SecureCluster, creds: Credentials) -> None:
    """creds' user sends to TOPIC (once the name server knows it from the broker's push)."""
    wait_for(lambda: can_route(c.namesrv, creds), timeout=20, what="the user pushed")
    with Producer("pg-sealed", c.namesrv, credentials=creds, retry_times=0) as producer:
        assert producer.send(Message(TOPIC, b"signed by a sealed password")).msg_id


def test_the_admin_seals_the_password_and_the_user_made_signs(secure: SecureCluster) -> None:
    broker_dir = secure.cluster.dir / "broker-a"
    with Admin(secure.namesrv, credentials=ROOT) as admin:
        body = admin.create_user_request(GINA.access_key, GINA.secret_key)
        assert body.user.password == "" and body.sealed_by == ROOT.access_key
        assert unseal(ROOT.secret_key, body.password_sealed) == GINA.secret_key.encode()
        assert GINA.secret_key.encode() not in msgspec.msgpack.encode(body)

        admin.create_user(GINA.access_key, GINA.secret_key)
        admin.create_acl("User:gina", [f"Topic:{TOPIC}"], ["Pub"], "Allow")
        assert {"username": "gina", "password": GINA.secret_key} in auth_file(broker_dir)["users"]
        sends(secure, GINA)

        admin.update_user(GINA.access_key, password=GINA_2.secret_key)
    sends(secure, GINA_2)
    # the old password no longer signs
    stale = ask(secure.cluster.broker_addr, AuthGetUserRequest(GINA.access_key), GINA)
    assert isinstance(stale, ErrorReply) and stale.code == ResponseCode.AUTH_BAD_SIGNATURE


def test_a_wrong_seal_or_a_clear_password_is_refused_and_changes_nothing(
    secure: SecureCluster,
) -> None:
    broker = secure.cluster.broker_addr
    broker_dir = secure.cluster.dir / "broker-a"
    before = auth_file(broker_dir)
    refused = [
        (
            AuthCreateUserRequest(AuthUser("mallory"), seal("not-root-s-key", b"pw-1"), "root"),
            ResponseCode.AUTH_BAD_SIGNATURE,
        ),
        (
            AuthUpdateUserRequest("root", password_sealed=seal("guess", b"pw"), sealed_by="root"),
            ResponseCode.AUTH_BAD_SIGNATURE,
        ),
        (  # sealed with a key that opens it, but not the signer's (root signs)
            AuthCreateUserRequest(
                AuthUser("mallory"), seal(INNER.secret_key, b"pw"), INNER.access_key
            ),
            ResponseCode.AUTH_BAD_SIGNATURE,
        ),
        (AuthCreateUserRequest(AuthUser("mallory", "clear-pw")), ResponseCode.INVALID_PARAMETER),
        (AuthUpdateUserRequest("root", password="clear-pw"), ResponseCode.INVALID_PARAMETER),
    ]
    for body, code in refused:
        reply = ask(broker, body, ROOT)
        assert isinstance(reply, ErrorReply) and reply.code == code, (body, reply)
    assert auth_file(broker_dir) == before


def test_the_cli_creates_a_user_under_authentication(secure: SecureCluster) -> None:
    """`ferry admin createUser` with the credentials from the environment: sealed by the SDK,
    opened by the broker with root's password."""
    env = {**os.environ, "FERRY_ACCESS_KEY": ROOT.access_key, "FERRY_SECRET_KEY": ROOT.secret_key}
    done = subprocess.run(
        [
            FERRY,
            "admin",
            "createUser",
            "-u",
            "hank",
            "-p",
            "hank-secret-0123",
            "-n",
            secure.namesrv,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "hank-secret-0123" not in done.stdout + done.stderr
    users = auth_file(secure.cluster.dir / "broker-a")["users"]
    assert {"username": "hank", "password": "hank-secret-0123"} in users


def test_get_user_and_list_user_never_send_a_password(secure: SecureCluster) -> None:
    broker = secure.cluster.broker_addr
    one = ask(broker, AuthGetUserRequest(ROOT.access_key), ROOT)
    assert isinstance(one, AuthUserReply)
    assert one.user == AuthUser(ROOT.access_key, "", "Super", "enable")
    listed = ask(broker, AuthListUserRequest(), ROOT)
    assert isinstance(listed, AuthUserListReply) and listed.users
    assert [u.password for u in listed.users] == [""] * len(listed.users)


def _broker_ids(namesrv: str) -> set[int]:
    info = ask(namesrv, GetClusterInfoRequest(), INNER)
    if not isinstance(info, ClusterInfoReply) or "broker-a" not in info.brokers:
        return set()
    return set(info.brokers["broker-a"].broker_addrs)


def test_a_slave_copies_the_users_sealed_with_the_inner_key(tmp_path: Path) -> None:
    overrides = {**HA_FAST, **SECURITY}
    master = start_local_cluster(str(tmp_path), overrides=overrides)
    try:
        slave = add_slave_group(master, str(tmp_path / "broker-a-s"), overrides=overrides)
        try:
            _slave_copies(master.namesrv_addr, master.broker_addr, slave.broker_addr)
        finally:
            slave.stop()
    finally:
        master.stop()
    kept = json.loads((tmp_path / "broker-a-s" / "config" / "auth.json").read_text())
    assert {"username": "erin", "password": "erin-secret-0123", "user_type": "Super"} in (
        kept["users"]
    )


def _slave_copies(namesrv: str, master: str, slave: str) -> None:
    wait_for(lambda: _broker_ids(namesrv) == {0, 1}, 60, "master and slave routed")
    erin = Credentials("erin", "erin-secret-0123")
    with Admin(namesrv, credentials=ROOT) as admin:
        admin.create_user(erin.access_key, erin.secret_key, "Super", broker_addr=master)

    def on_slave() -> bool:  # signed by erin: the slave knows her password
        reply = ask(slave, AuthGetUserRequest(erin.access_key), erin)
        return isinstance(reply, AuthUserReply)

    wait_for(on_slave, 30, "erin on the slave, her password with her")
    # what the master sends a slave: sealed, no password in it, opened by the inner key only
    reply = ask(master, GetAuthSnapshotRequest(), INNER)
    assert isinstance(reply, AuthSnapshotReply)
    assert reply.snapshot is None and reply.sealed
    wire = msgspec.msgpack.encode(reply)
    for secret in (erin.secret_key, ROOT.secret_key):
        assert secret.encode() not in wire
    plain = unseal(INNER.secret_key, reply.sealed)
    assert plain is not None
    users = {u.username: u.password for u in msgspec.msgpack.decode(plain, type=AuthSnapshot).users}
    assert users == {"root": ROOT.secret_key, "erin": erin.secret_key}
    assert unseal(ROOT.secret_key, reply.sealed) is None
    # the slave's copy stays current: known digest, nothing sent again
    again = ask(master, GetAuthSnapshotRequest(known_digest=reply.digest), INNER)
    assert isinstance(again, AuthSnapshotReply) and not again.sealed and again.snapshot is None
    # a user cannot ask for the snapshot, even a Super one
    refused = ask(master, GetAuthSnapshotRequest(), ROOT)
    assert isinstance(refused, ErrorReply), refused
    # the slave takes no change
    with pytest.raises(FerryError), Admin(namesrv, credentials=ROOT) as admin:
        admin.create_user("frank", "frank-secret-1", broker_addr=slave)
