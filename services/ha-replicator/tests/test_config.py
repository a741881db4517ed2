"""The replicator's keys: the HA port rule and what each role needs."""

from __future__ import annotations

import pytest

from ferry.ha.config import HaConfig
from ferry.protocol.errors import ConfigError
from ferry.runtime.config import load_config


def conf(**values: str) -> HaConfig:
    base = {"storeEndpoint": "tcp://127.0.0.1:1", "storeFeedEndpoint": "tcp://127.0.0.1:2"}
    return load_config(HaConfig, None, {**base, **values}, environ={})


def test_ha_port_is_listen_port_plus_one_unless_set() -> None:
    assert conf().ha_port == 10912
    assert conf(listenPort="20911").ha_port == 20912
    assert conf(haListenPort="30000").ha_port == 30000
    assert conf(listenPort="0").ha_port == 0  # a free port, as the launcher asks


def test_a_slave_needs_its_master_address_and_a_slave_id() -> None:
    with pytest.raises(ConfigError, match="haMasterAddress"):
        conf(brokerRole="SLAVE", brokerId="1")
    with pytest.raises(ConfigError, match="brokerId"):
        conf(brokerRole="SLAVE", brokerId="0", haMasterAddress="h:1")
    slave = conf(brokerRole="SLAVE", brokerId="1", haMasterAddress="h:1")
    assert slave.is_slave


def test_rocketmq_4_name_of_the_gap_key_is_accepted() -> None:
    assert conf(haSlaveFallbehindMax="1024").ha_max_gap_not_in_sync == 1024
