"""An ACL change is in force when its command returns (issue 42 §8): the broker answers
createUser/createAcl only once the name server and the controller that check requests hold
the change, so a new user's first send right after its grant is not refused."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import OtlpSink
from security_support import ROOT, SecureCluster, start_secure

from ferry.admin import Admin
from ferry.client import BadSignatureError, Credentials, Message, NoPermissionError, Producer
from ferry.remoting.auth_push import CONFIRM_S

TOPIC = "granted"
ROUNDS = 20


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[SecureCluster]:
    c = start_secure(Path(tmp_path_factory.mktemp("in-force")), sink.env())
    try:
        with Admin(c.namesrv, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, 2, 2, broker_addr=c.cluster.broker_addr)
        yield c
    finally:
        c.stop()


def test_grant_then_send_with_no_wait_is_never_refused(secure: SecureCluster) -> None:
    refused: list[str] = []
    with Admin(secure.namesrv, credentials=ROOT) as admin:
        for i in range(ROUNDS):
            user = Credentials(f"newcomer{i}", f"newcomer-secret-{i:04d}")
            admin.create_user(user.access_key, user.secret_key, "Normal")
            admin.create_acl(f"User:{user.access_key}", [f"Topic:{TOPIC}"], ["Pub"], "Allow")
            with Producer(f"pg-new{i}", secure.namesrv, credentials=user, retry_times=0) as p:
                try:
                    assert p.send(Message(TOPIC, f"round {i}".encode())).msg_id
                except (NoPermissionError, BadSignatureError) as err:
                    refused.append(f"round {i}: {err}")
    assert refused == [], f"{len(refused)} of {ROUNDS} first sends refused: {refused[:3]}"


def test_revoke_is_in_force_when_it_returns(secure: SecureCluster) -> None:
    """deleteAcl too: the first route lookup after it is refused."""
    user = Credentials("leaver", "leaver-secret-0123")
    with Admin(secure.namesrv, credentials=ROOT) as admin:
        admin.create_user(user.access_key, user.secret_key, "Normal")
        admin.create_acl(f"User:{user.access_key}", [f"Topic:{TOPIC}"], ["Pub"], "Allow")
        with Producer("pg-leaver", secure.namesrv, credentials=user, retry_times=0) as p:
            assert p.send(Message(TOPIC, b"before")).msg_id
        admin.delete_acl(f"User:{user.access_key}", [f"Topic:{TOPIC}"])
        with (
            Producer("pg-leaver2", secure.namesrv, credentials=user, retry_times=0) as p,
            pytest.raises(NoPermissionError),
        ):
            p.send(Message(TOPIC, b"after"))


def test_a_server_that_does_not_take_the_change_is_named(
    secure: SecureCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Last in this module: it stops the controller. The change is made, and the answer (and
    the Admin's WARNING) names the controller that has not got it."""
    controller = secure.controller.endpoints["addr"]
    controller = controller.split("://")[-1]
    secure.controller.stop()
    caplog.set_level(logging.WARNING, logger="ferry.admin.auth")
    with Admin(secure.namesrv, credentials=ROOT) as admin:
        started = time.monotonic()
        done = admin.create_user("late", "late-secret-0123", "Normal")
        took = time.monotonic() - started
    assert done == [secure.cluster.broker_addr]
    assert took < CONFIRM_S + 2.0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"controller {controller}" in m and "had not taken it" in m for m in warned), warned
