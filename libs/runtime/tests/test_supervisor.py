"""The supervisor's pieces that need no process: its policy from FERRY_RESTART_POLICY, how it
names an exit, and the arguments that bind a restarted service where the first start bound."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime.launcher import ServiceProcess
from ferry.runtime.supervisor import RestartPolicy, exit_status, pinned_args


def test_policy_defaults_follow_the_issue_and_the_env_changes_any_subset() -> None:
    default = RestartPolicy.from_env({})
    assert (default.first_wait, default.max_wait, default.stable_after) == (0.5, 30.0, 60.0)
    assert (default.max_crashes, default.window) == (5, 120.0)
    fast = RestartPolicy.from_env({"FERRY_RESTART_POLICY": "first_wait=0.05, max_crashes=3"})
    assert (fast.first_wait, fast.max_crashes, fast.max_wait) == (0.05, 3, 30.0)


@pytest.mark.parametrize("text", ["first=1", "max_wait=soon", "max_crashes=2.5"])
def test_a_bad_policy_is_a_config_error_naming_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match=text.split("=", maxsplit=1)[0]):
        RestartPolicy.from_env({"FERRY_RESTART_POLICY": text})


def test_exit_status_names_the_signal_or_the_code() -> None:
    assert exit_status(-9) == "SIGKILL"
    assert exit_status(-15) == "SIGTERM"
    assert exit_status(3) == "exit code 3"
    assert exit_status(None) == "still running"


def service(name: str, args: list[str], endpoints: dict[str, str]) -> ServiceProcess:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], text=True)
    proc.wait()
    return ServiceProcess(name, proc, endpoints=endpoints, args=args)


def test_a_restart_binds_what_the_first_start_bound() -> None:
    store = service(
        "broker-store",
        ["--set", "storeEndpoint=tcp://127.0.0.1:0"],
        {"endpoint": "tcp://127.0.0.1:4100", "feed": "ipc:///run/ferry/feed"},
    )
    assert pinned_args(store) == [
        "--set",
        "storeEndpoint=tcp://127.0.0.1:0",
        "--set",
        "storeEndpoint=tcp://127.0.0.1:4100",  # the later --set wins
        "--set",
        "storeFeedEndpoint=ipc:///run/ferry/feed",
    ]
    remoting = service("broker-remoting", [], {"addr": "10.0.0.5:10911"})
    assert pinned_args(remoting) == ["--set", "listenPort=10911"]
    console = service("console", ["--port", "0"], {"addr": "127.0.0.1:8081", "url": "x"})
    assert pinned_args(console) == ["--port", "0", "--port", "8081"]
    ha = service("ha-replicator", [], {"endpoint": "tcp://0.0.0.0:10912", "addr": "h:10912"})
    assert pinned_args(ha) == ["--set", "haListenPort=10912"]
    proxy = service("proxy", ["--set", "proxyListenPort=0"], {"grpc": "127.0.0.1:40123"})
    assert pinned_args(proxy) == ["--set", "proxyListenPort=0", "--set", "proxyListenPort=40123"]


def test_off_turns_restarts_off() -> None:
    assert RestartPolicy.from_env({"FERRY_RESTART_POLICY": "off"}).restart is False
    assert RestartPolicy.from_env({}).restart is True


def test_settings_replace_earlier_ones_and_come_last() -> None:
    from ferry.runtime.supervisor import with_settings

    args = ["-c", "b.conf", "--set", "brokerRole=SYNC_MASTER", "--set", "listenPort=10911"]
    out = with_settings(args, {"brokerRole": "SLAVE", "brokerId": "2"})
    assert out == [
        "-c",
        "b.conf",
        "--set",
        "listenPort=10911",
        "--set",
        "brokerRole=SLAVE",
        "--set",
        "brokerId=2",
    ]
    assert with_settings(out, {"brokerRole": "SLAVE", "brokerId": "2"}) == out
