"""A service directory's lock and abort marker: one owner, and how the last run ended."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ferry.protocol.errors import ServiceNotAvailableError
from ferry.runtime.dir_lock import DirLock, DirLockedError, LastStop, boot_id


def test_a_second_owner_of_the_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = DirLock(tmp_path, "index process")
    with pytest.raises(DirLockedError) as info:
        DirLock(tmp_path, "index process")
    assert isinstance(info.value, ServiceNotAvailableError)  # its wire code
    assert info.value.message == (
        f"directory {tmp_path} is in use by another index process "
        f"(its lock file {tmp_path / 'lock'} is held)"
    )
    first.release()
    DirLock(tmp_path, "index process").release()


def test_the_lock_file_names_the_owning_pid(tmp_path: Path) -> None:
    lock = DirLock(tmp_path, "broker-store")
    assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
    lock.release()


def test_release_twice_is_harmless(tmp_path: Path) -> None:
    lock = DirLock(tmp_path, "scheduler")
    lock.release()
    lock.release()
    DirLock(tmp_path, "scheduler").release()


def test_the_abort_marker_tells_a_clean_stop_a_killed_process_and_a_machine_crash(
    tmp_path: Path,
) -> None:
    lock = DirLock(tmp_path, "index process")
    assert lock.last_stop() is LastStop.CLEAN
    lock.mark_running()
    assert lock.last_stop() is LastStop.PROCESS_CRASH  # same boot: the page cache survived
    (tmp_path / "abort").write_text("another-boot\n")
    assert lock.last_stop() is LastStop.MACHINE_CRASH
    lock.mark_clean_stop()
    assert lock.last_stop() is LastStop.CLEAN
    lock.release()
    assert boot_id()  # this machine tells its boot apart
