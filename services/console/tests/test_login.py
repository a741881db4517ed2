"""The login's parts that need no cluster: the session store's expiry and bound, where a
login may send the browser next, and the console config's handling of its credentials."""

from __future__ import annotations

import pytest

from ferry.console.config import ConsoleConfig
from ferry.console.login import Sessions, is_open, safe_next
from ferry.console.state import Clients
from ferry.protocol.errors import ConfigError


def clients() -> Clients:
    return Clients(ConsoleConfig(), None, None)  # never started: nothing to connect


def test_a_session_is_found_by_its_token_until_it_idles_out() -> None:
    sessions = Sessions(idle_s=3600, max_age_s=3600, max_sessions=4)
    session, gone = sessions.add("alice", clients())
    assert gone == []
    assert len(session.token) >= 40
    found, _ = sessions.get(session.token)
    assert found is session
    assert sessions.get("not-a-token")[0] is None
    assert sessions.get("")[0] is None
    sessions.idle_s = 0.0  # every session has now been idle too long
    found, gone = sessions.get(session.token)
    assert found is None and gone == [session]
    assert sessions.get(session.token)[0] is None


def test_a_session_ends_at_its_absolute_age_even_in_use() -> None:
    sessions = Sessions(idle_s=3600, max_age_s=0.0, max_sessions=4)
    session, _ = sessions.add("alice", clients())
    found, gone = sessions.get(session.token)
    assert found is None and gone == [session]


def test_the_least_recently_used_session_makes_room_for_a_new_one() -> None:
    sessions = Sessions(idle_s=3600, max_age_s=3600, max_sessions=2)
    first, _ = sessions.add("a", clients())
    second, _ = sessions.add("b", clients())
    sessions.get(first.token)  # first used after second
    third, gone = sessions.add("c", clients())
    assert gone == [second]
    assert sessions.get(first.token)[0] is first
    assert sessions.get(third.token)[0] is third
    assert sessions.pop(third.token) is third
    assert sessions.get(third.token)[0] is None
    assert {s.access_key for s in sessions.drain()} == {"a"}


@pytest.mark.parametrize(
    ("asked", "sent_to"),
    [
        ("/topics?show=all", "/topics?show=all"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/x", "/"),
        ("/login", "/"),
        ("/logout", "/"),
        ("topics", "/"),
        ("/" + "x" * 600, "/"),
    ],
)
def test_after_a_login_the_browser_goes_only_to_a_page_of_the_console(
    asked: str, sent_to: str
) -> None:
    assert safe_next(asked) == sent_to


def test_only_the_probe_login_stylesheet_and_otlp_are_open() -> None:
    assert all(is_open(p) for p in ("/healthz", "/login", "/logout", "/v1/traces", "/static/a"))
    assert not any(is_open(p) for p in ("/", "/topics", "/api/trace/message/x", "/v1/tracesx"))


def test_the_console_takes_the_clis_variables_and_never_shows_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FERRY_ACCESS_KEY", "sampler")
    monkeypatch.setenv("FERRY_SECRET_KEY", "s3cret-value")
    monkeypatch.setenv("FERRY_TLS_SERVER_KEY", "/keys/server.key")
    config = ConsoleConfig()
    creds = config.credentials()
    assert creds is not None and creds.access_key == "sampler"
    assert config.server_key() == "/keys/server.key"
    given = ConsoleConfig(access_key="own", secret_key="own-secret-value")
    assert "own-secret-value" not in repr(given) and "***" in repr(given)
    assert "s3cret-value" not in repr(creds)
    monkeypatch.delenv("FERRY_SECRET_KEY")
    with pytest.raises(ConfigError):
        ConsoleConfig().check()
    with pytest.raises(ConfigError):
        ConsoleConfig(auth_required="maybe").check()
