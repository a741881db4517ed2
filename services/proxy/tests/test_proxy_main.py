"""`python -m ferry.proxy` refuses what it cannot serve in one line: a port taken (exit 1), a
config it does not take (exit 2), before it prints READY."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import zmq.auth

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import ProxyConfig, load_config

pytestmark = pytest.mark.integration


def run_proxy(home: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [a for item in sets for a in ("--set", item)]
    return subprocess.run(
        [sys.executable, "-m", "ferry.proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )


def test_a_port_in_use_exits_1_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_proxy(tmp_path, f"proxyListenPort={port}", "namesrvAddr=127.0.0.1:1")
    assert done.returncode == 1, done.stderr
    assert f"ferry-proxy: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "READY" not in done.stdout


def test_tls_without_its_keys_exits_2_naming_them(tmp_path: Path) -> None:
    done = run_proxy(tmp_path, "tlsEnable=true")
    assert done.returncode == 2
    assert "tlsServerKeyFile and tlsInternalKeyFile" in done.stderr


def test_tls_needs_the_grpc_certificate_and_key(tmp_path: Path) -> None:
    server, _ = zmq.auth.create_certificates(str(tmp_path), "server")
    internal, _ = zmq.auth.create_certificates(str(tmp_path), "internal")
    curve = {
        "tlsEnable": "true",
        "tlsServerKeyFile": server.replace(".key", ".key_secret"),
        "tlsInternalKeyFile": internal.replace(".key", ".key_secret"),
    }
    with pytest.raises(ConfigError, match="tlsServerCertPath and tlsServerKeyPath"):
        load_config(ProxyConfig, None, curve, environ={})
    pem = {"tlsServerCertPath": "/x/cert.pem", "tlsServerKeyPath": "/x/key.pem"}
    config = load_config(ProxyConfig, None, {**curve, **pem}, environ={})
    assert (config.tls_server_cert_path, config.tls_server_key_path) == (
        "/x/cert.pem",
        "/x/key.pem",
    )
    # files that are not there, or not PEM: one line, exit 2, before READY
    (tmp_path / "not.pem").write_text("not a certificate")
    sets = [f"{k}={v}" for k, v in curve.items()] + ["namesrvAddr=127.0.0.1:1"]
    missing = run_proxy(tmp_path, *sets, *[f"{k}={v}" for k, v in pem.items()])
    assert missing.returncode == 2, missing.stderr
    assert "cannot read the TLS certificate (tlsServerCertPath) /x/cert.pem" in missing.stderr
    garbled = run_proxy(
        tmp_path, *sets, f"tlsServerCertPath={tmp_path / 'not.pem'}", "tlsServerKeyPath=/x/k"
    )
    assert garbled.returncode == 2, garbled.stderr
    assert "not.pem is not PEM" in garbled.stderr
    assert "READY" not in missing.stdout + garbled.stdout


def test_config_defaults_and_bounds() -> None:
    config = load_config(ProxyConfig, None, {}, environ={})
    assert (config.proxy_listen_port, config.listen_host) == (8081, "127.0.0.1")
    assert config.max_message_size == 4 * 1024 * 1024
    assert load_config(ProxyConfig, None, {"listenHost": "0.0.0.0"}, {}).advertised_host == (
        "127.0.0.1"
    )
    with pytest.raises(ConfigError, match="proxyListenPort"):
        load_config(ProxyConfig, None, {"proxyListenPort": "70000"}, environ={})
    with pytest.raises(ConfigError, match="namesrvAddr"):
        load_config(ProxyConfig, None, {"namesrvAddr": " "}, environ={})
