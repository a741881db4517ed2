"""The index directory's lock and abort marker: one owner, and how the last run ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.index.dir_lock import DirLock, IndexLockedError, LastStop, boot_id


def test_a_second_owner_of_the_directory_is_refused(tmp_path: Path) -> None:
    first = DirLock(tmp_path)
    with pytest.raises(IndexLockedError):
        DirLock(tmp_path)
    first.release()
    DirLock(tmp_path).release()


def test_the_abort_marker_tells_a_clean_stop_a_killed_process_and_a_machine_crash(
    tmp_path: Path,
) -> None:
    lock = DirLock(tmp_path)
    assert lock.last_stop() is LastStop.CLEAN
    lock.mark_running()
    assert lock.last_stop() is LastStop.PROCESS_CRASH  # same boot: the page cache survived
    (tmp_path / "abort").write_text("another-boot\n")
    assert lock.last_stop() is LastStop.MACHINE_CRASH
    lock.mark_clean_stop()
    assert lock.last_stop() is LastStop.CLEAN
    lock.release()
    assert boot_id()  # this machine tells its boot apart
