"""run_service, the main() of every service: flags, config, and the exit codes it promises."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime.cli import Flag, run_service
from ferry.runtime.config import NamesrvConfig
from ferry.runtime.dir_lock import DirLockedError

PORT = Flag(("--port",), "listenPort", "listen port", int)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    # run_service configures the root logger, as a process does; put pytest's back afterwards
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def main(
    argv: list[str],
    outcome: int | Exception | None = None,
    *,
    expected: tuple[type[Exception], ...] = (),
    explain: Callable[[NamesrvConfig, Exception], str] | None = None,
    flags: Sequence[Flag] = (),
) -> list[NamesrvConfig]:
    """run_service over a run() that records its config, then returns or raises `outcome`."""
    seen: list[NamesrvConfig] = []

    def serve(config: NamesrvConfig) -> int | None:
        seen.append(config)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    run_service(
        "ferry-test",
        "test",
        NamesrvConfig,
        serve,
        argv,
        expected=expected,
        explain=explain,
        flags=flags,
        allocator_thresholds=False,
    )
    return seen


def exit_of(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    outcome: Exception | None = None,
    **kwargs: Any,
) -> tuple[int, str]:
    """The exit code and the one line on stderr."""
    with pytest.raises(SystemExit) as info:
        main(argv, outcome, **kwargs)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert isinstance(info.value.code, int)
    return info.value.code, err[0]


def test_a_flag_sets_its_key_and_wins_over_set() -> None:
    [config] = main(["--set", "listenPort=1234", "--port", "4321"], flags=[PORT])
    assert config.listen_port == 4321
    [config] = main(["--set", "listenPort=1234"], flags=[PORT])
    assert config.listen_port == 1234


def test_a_bad_config_exits_2_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, line = exit_of(capsys, ["--set", "listenPort=abc"])
    assert code == 2
    assert line.startswith("ferry-test: ") and "listenPort" in line


def test_config_refused_at_start_exits_2_and_an_expected_error_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = exit_of(capsys, [], ConfigError("stateFile is torn"))
    assert (code, line) == (2, "ferry-test: stateFile is torn")
    code, line = exit_of(capsys, [], DirLockedError("in use"), expected=(DirLockedError,))
    assert (code, line) == (1, "ferry-test: in use")
    code, line = exit_of(
        capsys,
        [],
        OSError("address in use"),
        expected=(OSError,),
        explain=lambda config, exc: f"cannot listen on {config.listen_port}: {exc}",
    )
    assert (code, line) == (1, "ferry-test: cannot listen on 9876: address in use")


def test_what_run_returns_is_the_exit_code() -> None:
    with pytest.raises(SystemExit) as info:
        main([], 3)
    assert info.value.code == 3
    assert len(main([], 0)) == 1  # 0 or None: main() returns
