"""How the query commands read times: ms, ISO 8601, and mqadmin's yyyy-MM-dd#HH:mm:ss:SSS."""

from __future__ import annotations

import datetime as dt

import pytest
import typer

from ferry.cli.query import parse_time


def test_times_are_read_as_ms_iso_or_the_mqadmin_format() -> None:
    local = dt.datetime(2024, 5, 6, 7, 8, 9, 123_000)
    expected = int(local.timestamp() * 1000)
    assert parse_time("1700000000123", 0) == 1_700_000_000_123
    assert parse_time("2024-05-06T07:08:09.123", 0) == expected
    assert parse_time("2024-05-06#07:08:09:123", 0) == expected
    assert parse_time("2024-05-06T07:08:09+00:00", 0) == 1_714_979_289_000
    assert parse_time(None, 42) == 42
    assert parse_time("  ", 42) == 42


def test_a_time_that_does_not_parse_is_a_bad_parameter() -> None:
    with pytest.raises(typer.BadParameter):
        parse_time("yesterday", 0)
