"""The controller's keys: RocketMQ's names, checked as it starts."""

from __future__ import annotations

import pytest

from ferry.controller.config import ControllerConfig
from ferry.protocol.errors import ConfigError
from ferry.runtime.config import load_config


def test_rocketmq_key_names_and_defaults() -> None:
    cfg = load_config(
        ControllerConfig,
        overrides={
            "controllerListenPort": "0",
            "etcdEndpoints": "http://10.0.0.1:2379;10.0.0.2:2379",
            "enableElectUncleanMaster": "true",
        },
        environ={},
    )
    assert cfg.controller_listen_port == 0
    assert cfg.enable_elect_unclean_master is True
    assert cfg.controller_heart_beat_timeout_mills == 10_000
    assert cfg.scan_not_active_broker_interval == 1000
    assert cfg.endpoints() == [("http", "10.0.0.1", 2379), ("http", "10.0.0.2", 2379)]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("etcdEndpoints", "http://nohost", "etcdEndpoints"),
        ("etcdEndpoints", " ; ", "etcdEndpoints is empty"),
        ("controllerHeartBeatTimeoutMills", "500", "controllerHeartBeatTimeoutMills"),
        ("controllerListenPort", "70000", "controllerListenPort"),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config(ControllerConfig, overrides={key: value}, environ={})
