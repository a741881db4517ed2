"""The `secure` profile of deploy/docker-compose.yml (issue 27): the name server, broker-a and
the console with authentication, authorization and CURVE on, keys made by the one-shot
secure-keys service, secrets from SECURE_* variables. From the host, through the published
ports: clients without the server key, without credentials or with a wrong secret are refused;
the initial Super user with server.key creates a topic, sends and consumes; the console asks
for a login, refuses a wrong one, and gives a session for the right one; it takes the
services' spans only with its token."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message as Headers
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from e2e_support import consume_all
from itest_support import wait_for

from ferry.admin import Admin
from ferry.client import (
    BadSignatureError,
    ConnectionFailedError,
    Credentials,
    Message,
    NoCredentialsError,
    Producer,
    SendStatus,
)

if TYPE_CHECKING:
    from conftest import ComposeStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "E2ESecure"
COOKIE = "ferry_console_session"


def root_of(stack: ComposeStack) -> Credentials:
    return Credentials(stack.settings["SECURE_ROOT_USER"], stack.settings["SECURE_ROOT_PASSWORD"])


@pytest.fixture(scope="module")
def server_key(secure_stack: ComposeStack, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The cluster's public server.key, fetched as deploy/README.md tells clients to."""
    text = secure_stack.run("exec", "-T", "secure-namesrv", "cat", "/etc/ferry/keys/server.key")
    path = tmp_path_factory.mktemp("secure") / "server.key"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def root(secure_stack: ComposeStack, server_key: str) -> Credentials:
    """The initial Super user, once the name server knows it (the broker pushes its users)."""
    creds = root_of(secure_stack)

    def known() -> bool:
        try:
            with Admin(secure_stack.namesrv, credentials=creds, tls_server_key=server_key) as a:
                a.cluster_info()
        except BadSignatureError:
            return False
        return True

    wait_for(known, 30, "the name server to know the initial user")
    return creds


def test_clients_without_the_key_or_credentials_are_refused(
    secure_stack: ComposeStack, server_key: str, root: Credentials
) -> None:
    namesrv = secure_stack.namesrv
    # no server key: the CURVE handshake fails, and the client says so
    with pytest.raises(ConnectionFailedError) as no_key, Admin(namesrv) as admin:
        admin.cluster_info()
    assert "security handshake" in no_key.value.message

    # the key but no credentials: refused by the name server and by the broker alike
    with pytest.raises(NoCredentialsError), Admin(namesrv, tls_server_key=server_key) as admin:
        admin.cluster_info()
    with (
        pytest.raises(NoCredentialsError),
        Producer("e2e-unsigned", namesrv, tls_server_key=server_key) as producer,
    ):
        producer.send(Message(TOPIC, b"unsigned"))
    with pytest.raises(NoCredentialsError), Admin(namesrv, tls_server_key=server_key) as admin:
        admin.create_topic(TOPIC, 2, 2, broker_addr=secure_stack.broker_addr)

    # the right user with a wrong secret
    wrong = Credentials(root.access_key, "not-the-secret")
    with (
        pytest.raises(BadSignatureError),
        Admin(namesrv, credentials=wrong, tls_server_key=server_key) as admin,
    ):
        admin.cluster_info()

    # what was refused changed nothing: the topic does not exist (autoCreateTopicEnable=false)
    with Admin(namesrv, credentials=root, tls_server_key=server_key) as admin:
        assert TOPIC not in admin.topic_list()


def test_the_initial_user_with_the_server_key_sends_and_consumes(
    secure_stack: ComposeStack, server_key: str, root: Credentials
) -> None:
    namesrv = secure_stack.namesrv
    with Admin(namesrv, credentials=root, tls_server_key=server_key) as admin:
        admin.create_topic(TOPIC, 2, 2)
    bodies = {f"secure-{i}".encode() for i in range(20)}
    with Producer("e2e-secure", namesrv, credentials=root, tls_server_key=server_key) as producer:
        for body in sorted(bodies):
            assert producer.send(Message(TOPIC, body)).status is SendStatus.SEND_OK
    got = consume_all(
        namesrv, "e2e-secure-reader", TOPIC, bodies, credentials=root, tls_server_key=server_key
    )
    assert sorted(m.body for m in got) == sorted(bodies)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None


Answer = tuple[int, Headers, str]


def http(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """(status, headers, body) of one request; redirects are not followed."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=15) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers, err.read().decode()


def login(url: str, creds: Credentials) -> Answer:
    form = {"access_key": creds.access_key, "secret_key": creds.secret_key, "next": "/"}
    return http(url + "/login", urllib.parse.urlencode(form).encode())


def test_the_console_asks_for_a_login_and_takes_spans_only_with_its_token(
    secure_stack: ComposeStack, server_key: str, root: Credentials
) -> None:
    url = secure_stack.console_url
    status, _, page = http(url + "/")
    assert status == 401 and 'id="login-form"' in page
    assert "broker-a" not in page

    status, headers, page = login(url, Credentials(root.access_key, "not-the-secret"))
    assert status == 401 and "refused" in page
    assert "set-cookie" not in {k.lower() for k in headers}

    status, headers, _ = login(url, root)
    assert status == 303, status
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
    session = {"Cookie": cookie.split(";", 1)[0]}
    status, _, page = http(url + "/", headers=session)
    assert status == 200 and "DefaultCluster" in page and "broker-a" in page
    assert root.access_key in page  # logged in as

    # the services' spans reach the console with the token: the broker's span of a send
    with Producer(
        "e2e-traced", secure_stack.namesrv, credentials=root, tls_server_key=server_key
    ) as p:
        sent = p.send(Message(TOPIC, b"traced"))

    def traced() -> bool:
        status, _, body = http(f"{url}/api/trace/message/{sent.msg_id}", headers=session)
        return status == 200 and bool(json.loads(body)["traces"])

    wait_for(traced, 60, "the broker's span of the send in the console")
    # ... and only with it
    export = {"Content-Type": "application/json"}
    assert http(url + "/v1/traces", b'{"resourceSpans":[]}', export)[0] == 401

    # no secret reached any container's log
    logs = secure_stack.logs()
    for name in ("SECURE_INNER_SECRET_KEY", "SECURE_ROOT_PASSWORD", "SECURE_OTLP_TOKEN"):
        assert secure_stack.settings[name] not in logs, name


def test_the_keys_service_keeps_the_keys_it_made(
    secure_stack: ComposeStack, server_key: str
) -> None:
    """Run again (as every `up` does), it keeps the keys every service and client has."""
    out = secure_stack.run("run", "--rm", "secure-keys")
    assert "CURVE keys: kept" in out
    again = secure_stack.run("exec", "-T", "secure-namesrv", "cat", "/etc/ferry/keys/server.key")
    assert again == Path(server_key).read_text()
