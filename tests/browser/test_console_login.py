"""The console's login against a cluster with authentication and authorization on (issue 27),
in a real browser: without a login every page shows the login form; a wrong secret is refused
with the error; the right one shows the cluster page, through a session cookie that scripts
cannot read and other sites do not send; the session's pages are asked with the logged-in
user's credentials (the cluster's ACLs apply: a topic the user may not Get is refused, though
the console's own credentials are a super user's); logout returns to the form and the old
cookie no longer opens a page. The secret shows in no page and no line the console printed.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from itest_support import wait_for
from security_support import ROOT, SecureCluster, start_secure
from selenium import webdriver
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).parent))  # the browser helpers of the console's test
from test_console_browser import screenshot, start_browser, submit, text, wait_element

from ferry.admin import Admin
from ferry.client import Credentials
from ferry.protocol.errors import FerryError
from ferry.runtime.launcher import ServiceProcess, start_service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

VIEWER = Credentials("viewer", "viewer-secret-4567")
GETTER = Credentials("getter", "getter-secret-8901")  # Cluster Get, not List
HIDDEN_TOPIC = "payroll"  # the viewer may not Get it
COOKIE = "ferry_console_session"


@dataclass
class SecureConsole:
    cluster: SecureCluster
    process: ServiceProcess
    url: str


def can_read_cluster(namesrv: str, creds: Credentials) -> bool:
    try:
        with Admin(namesrv, credentials=creds) as admin:
            admin.cluster_info()
    except FerryError:
        return False
    return True


@pytest.fixture(scope="module")
def secure_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureConsole]:
    tmp = tmp_path_factory.mktemp("console-login")
    cluster = start_secure(tmp)
    process = None
    try:
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            admin.create_topic(HIDDEN_TOPIC, 2, 2, broker_addr=cluster.cluster.broker_addr)
            admin.create_user(VIEWER.access_key, VIEWER.secret_key, "Normal")
            admin.create_acl(f"User:{VIEWER.access_key}", ["Cluster"], ["Get", "List"], "Allow")
            admin.create_user(GETTER.access_key, GETTER.secret_key, "Normal")
            admin.create_acl(f"User:{GETTER.access_key}", ["Cluster"], ["Get"], "Allow")

        # the name server learns the users from the broker's push
        def pushed() -> bool:
            return all(can_read_cluster(cluster.namesrv, u) for u in (VIEWER, GETTER))

        wait_for(pushed, 30, "the users pushed")
        # the console's own (sampler) credentials are the super user's, from the CLI's variables
        env = {
            **os.environ,
            "FERRY_ACCESS_KEY": ROOT.access_key,
            "FERRY_SECRET_KEY": ROOT.secret_key,
        }
        env["FERRY_sampleIntervalMs"] = "500"
        process = start_service(
            "console",
            ["-n", cluster.namesrv, "--port", "0", "--data-dir", str(tmp / "console")],
            env=env,
        )
        yield SecureConsole(cluster, process, process.endpoints["url"])
    finally:
        if process is not None:
            process.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


def http_status(url: str, cookie: str = "") -> int:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        err.close()
        return err.code


def test_login_gates_every_page_and_signs_with_the_users_credentials(
    secure_console: SecureConsole, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    url = secure_console.url

    # no login: pages and APIs alike are refused; the health probe and OTLP stay open
    for path in ("/", "/topics", "/groups", "/messages", "/traces"):
        browser.get(url + path)
        wait_element(browser, "login-form", "secret key")
        assert "Cluster" not in [a.text for a in browser.find_elements(By.ID, "nav-cluster")]
        assert "broker-a" not in text(browser)
    assert http_status(url + "/api/trace/message/X") == 401
    assert http_status(url + "/healthz") == 200
    screenshot(browser, "login-form")

    # a wrong secret: the form again, with the error, the access key kept, the secret not
    browser.get(url + "/")
    submit(browser, "login-form", access_key=VIEWER.access_key, secret_key="not-the-secret")
    wait_element(browser, "login-error", "refused")
    assert "refused" in browser.find_element(By.ID, "login-error").text
    assert browser.find_element(By.ID, "access-key").get_attribute("value") == VIEWER.access_key
    assert browser.find_element(By.ID, "secret-key").get_attribute("value") == ""
    assert not [c for c in browser.get_cookies() if c["name"] == COOKIE]

    # the right one: the cluster page, with whom is logged in
    browser.get(url + "/topics")
    submit(browser, "login-form", access_key=VIEWER.access_key, secret_key=VIEWER.secret_key)
    wait_element(browser, "logged-in-as", VIEWER.access_key)
    assert browser.current_url.endswith("/topics")  # back where the login was asked
    browser.get(url + "/")
    wait_element(browser, "logged-in-as", VIEWER.access_key)
    assert "broker-a" in text(browser) and "DefaultCluster" in text(browser)
    screenshot(browser, "logged-in")
    (cookie,) = [c for c in browser.get_cookies() if c["name"] == COOKIE]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert len(cookie["value"]) >= 40
    session = f"{COOKIE}={cookie['value']}"
    assert http_status(url + "/", session) == 200

    # the viewer's ACLs apply, not the console's super user: a topic it may not Get
    browser.get(url + f"/topic/{HIDDEN_TOPIC}")
    page = text(browser)
    assert "403" in page and "NO_PERMISSION" in page, page[:2000]

    # logout: the form again, and the old cookie opens nothing
    browser.find_element(By.ID, "logout").click()
    wait_element(browser, "login-form", "secret key")
    assert not [c for c in browser.get_cookies() if c["name"] == COOKIE]
    assert http_status(url + "/", session) == 401
    browser.get(url + "/")
    wait_element(browser, "login-form", "secret key")

    # the secrets were never printed
    output = "\n".join(secure_console.process.output)
    for secret in (VIEWER.secret_key, ROOT.secret_key, "not-the-secret"):
        assert secret not in output


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None


def http_login(url: str, creds: Credentials) -> str:
    """The session cookie ("name=value") of a login posted as the form posts it."""
    body = urllib.parse.urlencode(
        {"access_key": creds.access_key, "secret_key": creds.secret_key, "next": "/"}
    ).encode()
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as answer:  # the 303 is not followed
        opener.open(urllib.request.Request(url + "/login", data=body), timeout=10)
    answer.value.close()
    assert answer.value.code == 303
    cookie = answer.value.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie
    return cookie.split(";", 1)[0]


def test_what_the_console_gathered_itself_needs_cluster_list(
    secure_console: SecureConsole,
) -> None:
    """The sampler lists every group, and the trace store holds every span, through the
    console's own credentials; a user who may not list the cluster sees neither, though the
    cluster page (Cluster Get) opens."""
    url = secure_console.url
    getter, viewer = http_login(url, GETTER), http_login(url, VIEWER)
    assert http_status(url + "/", getter) == 200
    assert http_status(url + "/groups", getter) == 403
    assert http_status(url + "/topics", getter) == 403
    assert http_status(url + "/traces", getter) == 403  # the console's own trace store
    assert http_status(url + "/api/trace/message/X", getter) == 403
    assert http_status(url + "/groups", viewer) == 200
    assert http_status(url + "/traces", viewer) == 200


def test_a_login_post_from_another_site_is_refused(secure_console: SecureConsole) -> None:
    body = f"access_key={VIEWER.access_key}&secret_key={VIEWER.secret_key}&next=/".encode()
    request = urllib.request.Request(
        secure_console.url + "/login",
        data=body,
        headers={
            "Origin": "http://evil.example",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()
    assert refused.value.code == 403
    assert "set-cookie" not in {k.lower() for k in refused.value.headers}


def test_a_console_without_credentials_finds_out_the_cluster_authenticates(
    secure_console: SecureConsole, tmp_path: Path
) -> None:
    """authRequired=auto with no credentials given: an unsigned request refused with
    NoCredentials tells the console to ask for logins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    process = start_service(
        "console",
        ["-n", secure_console.cluster.namesrv, "--port", "0", "--data-dir", str(tmp_path)],
        env=env,
    )
    try:
        url = process.endpoints["url"]
        request = urllib.request.Request(url + "/topics")
        with pytest.raises(urllib.error.HTTPError) as asked:
            urllib.request.urlopen(request, timeout=10)
        page = asked.value.read().decode()
        asked.value.close()
        assert asked.value.code == 401
        assert 'id="login-form"' in page and 'value="/topics"' in page
    finally:
        process.stop()
