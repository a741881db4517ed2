"""The scheduler's settings: delay levels parsed and checked, bad values named."""

from __future__ import annotations

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime.config import DEFAULT_DELAY_LEVELS, load_config, parse_delay_levels
from ferry.scheduler.config import SchedulerConfig


def test_the_default_levels_are_rocketmqs_eighteen() -> None:
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18
    assert levels[:3] == [1000, 5000, 10_000] and levels[-1] == 2 * 3_600_000
    assert parse_delay_levels("500ms 1d") == [500, 86_400_000]


@pytest.mark.parametrize("text", ["", "1x", "0s", "s", "1s -2s", "1.5s"])
def test_bad_delay_levels_are_refused_with_the_key_named(text: str) -> None:
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        load_config(
            SchedulerConfig, None, {"messageDelayLevel": text, "storeEndpoint": "tcp://x:1"}, {}
        )


def test_the_scheduler_needs_its_store() -> None:
    with pytest.raises(ConfigError, match="storeEndpoint"):
        load_config(SchedulerConfig, None, {}, {})
    config = load_config(
        SchedulerConfig, None, {"storeEndpoint": "tcp://127.0.0.1:1", "timerMaxDelaySec": "60"}, {}
    )
    assert config.timer_max_delay_sec == 60 and config.delay_levels_ms[0] == 1000
