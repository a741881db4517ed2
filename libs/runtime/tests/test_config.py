import logging
import tomllib
from pathlib import Path

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import BrokerConfig, NamesrvConfig, load_config, parse_overrides
from ferry.runtime.properties import parse_properties
from ferry.runtime.version import package_version

SEED = Path(__file__).with_name("seed_broker.conf")


def test_properties_parser_handles_comments_separators_and_continuations() -> None:
    text = "# c\n! c2\na=1\nb : two words\nc   3\nd=x\\\n  y\n\ne=\n"
    assert parse_properties(text) == {"a": "1", "b": "two words", "c": "3", "d": "xy", "e": ""}


def test_seed_style_broker_conf_is_accepted_as_is(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ferry.config"):
        cfg = load_config(BrokerConfig, SEED, environ={})
    assert cfg.listen_port == 10911
    assert cfg.file_reserved_time == 120
    assert cfg.mapped_file_size_commit_log == 1073741824  # old "maped" spelling understood
    assert cfg.mapped_file_size_consume_queue == 300000
    assert cfg.disk_max_used_space_ratio == 88
    assert cfg.max_message_size == 65536
    assert cfg.broker_ip1 == "192.168.29.18"  # trailing comment stripped
    assert cfg.advertised_host == "192.168.29.18"
    assert cfg.auto_create_subscription_group is True
    unknown = [r for r in caplog.records if "does not use" in r.getMessage()]
    assert len(unknown) == 1  # reported once
    assert "pullMessageThreadPoolNums" in unknown[0].getMessage()


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    conf = tmp_path / "b.conf"
    conf.write_text("listenPort=1000\nbrokerName=from-file\nnamesrvAddr=file:9876\n")
    env = {"FERRY_listenPort": "2000", "NAMESRV_ADDR": "env:9876"}
    cfg = load_config(BrokerConfig, conf, {"listenPort": "3000"}, environ=env)
    assert cfg.listen_port == 3000
    assert cfg.broker_name == "from-file"
    assert cfg.namesrv_addr == "file:9876"  # the file wins over NAMESRV_ADDR
    cfg = load_config(BrokerConfig, None, {}, environ=env)
    assert cfg.listen_port == 2000
    assert cfg.namesrv_addr == "env:9876"


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("listenPort", "abc", "listenPort"),
        ("brokerRole", "LEADER", "brokerRole"),
        ("flushDiskType", "SOMETIMES", "flushDiskType"),
        ("mappedFileSizeConsumeQueue", "30", "multiple of 20"),
        ("diskMaxUsedSpaceRatio", "99", "diskMaxUsedSpaceRatio"),
        ("autoCreateTopicEnable", "perhaps", "autoCreateTopicEnable"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(key: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(BrokerConfig, None, {key: value}, environ={})
    assert fragment in str(info.value)


def test_missing_conf_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(NamesrvConfig, tmp_path / "nope.conf", environ={})


def test_parse_overrides() -> None:
    assert parse_overrides(["a=1", "b = x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_internal_endpoints_default_to_ipc_under_the_run_dir_or_tcp_when_too_long(
    tmp_path: Path,
) -> None:
    short = BrokerConfig(store_path_root_dir=str(tmp_path))
    assert short.run_endpoint("index.sock") == f"ipc://{tmp_path.resolve()}/run/index.sock"
    long = BrokerConfig(store_path_root_dir=str(tmp_path / ("d" * 120)))
    assert long.run_endpoint("index.sock") == "tcp://127.0.0.1:0"


def test_package_version_is_the_installed_one_or_empty() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert package_version("ferry-runtime") == pyproject["project"]["version"]
    assert package_version("ferry-no-such-package") == ""


def test_controller_mode_keys_are_rocketmqs_and_checked() -> None:
    on = {"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878", "brokerId": "2"}
    cfg = load_config(BrokerConfig, None, on, environ={})
    assert cfg.enable_controller_mode and cfg.controller_addr == "127.0.0.1:9878"
    assert cfg.registered_broker_id == 0  # a master registers as 0 whatever its replica id
    slave = load_config(BrokerConfig, None, {**on, "brokerRole": "SLAVE"}, environ={})
    assert slave.registered_broker_id == 2
    assert cfg.ha_max_time_slave_not_catchup == 15_000 and not cfg.all_ack_in_sync_state_set
    for bad, fragment in (
        ({"brokerId": "0"}, "replica's id"),
        ({"controllerAddr": ""}, "needs controllerAddr"),
        ({"controllerAddr": "a:1;nope"}, "'nope' is not host:port"),
        ({"minInSyncReplicas": "0"}, "minInSyncReplicas"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            load_config(BrokerConfig, None, {**on, **bad}, environ={})
