"""broker.conf's ACL 2.0 keys: off by default, initAuthenticationUser as RocketMQ writes it in
a properties file, and a bad value refused with a ConfigError that shows no password."""

from pathlib import Path

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig, load_config


def test_security_is_off_by_default() -> None:
    config = load_config(BrokerConfig, environ={})
    assert not config.authentication_enabled and not config.authorization_enabled
    assert config.init_user() is None


def test_init_user_is_read_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text('initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n')
    assert load_config(BrokerConfig, conf, environ={}).init_user() == ("rocketmq", "12345678")


@pytest.mark.parametrize(
    "value",
    [
        '{"username":"root"}',  # no password
        '{"username":"","password":"secret-9"}',
        '["root","secret-9"]',
        "{username:root,password:secret-9}",  # not JSON
        "root:secret-9",
    ],
)
def test_a_bad_init_user_stops_the_broker_without_showing_the_password(value: str) -> None:
    with pytest.raises(ConfigError, match="initAuthenticationUser") as refused:
        load_config(BrokerConfig, overrides={"initAuthenticationUser": value}, environ={})
    assert "secret-9" not in str(refused.value)
