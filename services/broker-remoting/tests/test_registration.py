import pytest

from ferry.protocol.errors import ConfigError
from ferry.remoting.registration import parse_namesrv_addr, register_period_s


def test_namesrv_addr_takes_one_or_a_semicolon_list() -> None:
    assert parse_namesrv_addr("127.0.0.1:9876") == ["127.0.0.1:9876"]
    assert parse_namesrv_addr("ns1:9876; ns2:9876;;ns1:9876;") == ["ns1:9876", "ns2:9876"]
    assert parse_namesrv_addr("") == []


@pytest.mark.parametrize("text", ["ns1", "ns1:", ":9876", "ns1:port", "ns1:70000", "ns1:0"])
def test_bad_namesrv_addr_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_namesrv_addr(text)


def test_register_period_stays_within_what_name_servers_tolerate() -> None:
    assert register_period_s(30_000) == 30.0
    assert register_period_s(10) == 1.0
    assert register_period_s(600_000) == 60.0
