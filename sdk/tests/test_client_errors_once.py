"""A refused connection is said once, in plain words: by the SDK's exception and by the CLI.

Nothing listens on 127.0.0.1:1 (a privileged port), so every connection attempt is refused.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.admin import Admin
from ferry.client import ConnectionFailedError, Message, Producer

NOBODY = "127.0.0.1:1"
SAID = f"name server {NOBODY}: connection refused, nothing answers there (is it running?)"


def said_once(text: str) -> None:
    flat = " ".join(text.split())  # the CLI wraps long lines at the terminal's width
    assert flat.count("connection refused") == 1, text
    assert flat.count(NOBODY) == 1, text
    assert "RPC_SEND_TO_CHANNEL_FAILED" not in flat
    assert "not connected" not in flat


def test_a_producer_says_a_refused_name_server_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ferry")
    with (
        Producer("errors-once", NOBODY, retry_times=2) as producer,
        pytest.raises(ConnectionFailedError) as raised,
    ):
        producer.send(Message("T", b"x"))
    assert str(raised.value) == SAID
    said_once(str(raised.value))
    # the retries do not repeat it in the log: the exception is where it is said
    # (Ferry's own loggers: a tracer provider an earlier test of this worker shut down warns
    # from opentelemetry's)
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("ferry")
    ]


def test_admin_says_it_once() -> None:
    with Admin(NOBODY) as admin, pytest.raises(ConnectionFailedError) as raised:
        admin.cluster_info()
    said_once(str(raised.value))


def test_the_cli_says_it_once() -> None:
    ferry = Path(sys.executable).parent / "ferry"
    done = subprocess.run(
        [str(ferry), "admin", "clusterList", "-n", NOBODY],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode != 0
    assert done.stdout == ""
    said_once(done.stderr)
    assert "connection refused, nothing answers there (is it running?)" in " ".join(
        done.stderr.split()
    )


def test_the_cli_names_a_refusing_broker_once() -> None:
    ferry = Path(sys.executable).parent / "ferry"
    done = subprocess.run(
        [str(ferry), "admin", "brokerStatus", "-b", NOBODY, "-n", NOBODY],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode != 0
    said_once(done.stderr)
    assert f"broker {NOBODY}: connection refused, nothing answers there" in " ".join(
        done.stderr.split()
    )
