from __future__ import annotations

from pathlib import Path

import pytest

from ferry.protocol.errors import ConfigError
from ferry.runtime import epoch_file
from ferry.runtime.epoch_file import truncate_point


def test_entries_are_saved_atomically_and_read_back(tmp_path: Path) -> None:
    assert epoch_file.load(tmp_path) == []
    epoch_file.append(tmp_path, 1, 0)
    assert epoch_file.append(tmp_path, 2, 4096) == [(1, 0), (2, 4096)]
    assert epoch_file.load(tmp_path) == [(1, 0), (2, 4096)]
    assert not (tmp_path / "epochFileCheckpoint.tmp").exists()


def test_a_damaged_or_disordered_file_is_a_config_error_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / epoch_file.FILE_NAME).write_text("1 0\n2 x\n")
    with pytest.raises(ConfigError, match=":2: "):
        epoch_file.load(tmp_path)
    (tmp_path / epoch_file.FILE_NAME).write_text("2 100\n1 200\n")
    with pytest.raises(ConfigError, match="does not follow"):
        epoch_file.load(tmp_path)


def test_an_old_master_keeps_what_the_group_kept_and_drops_its_own_tail() -> None:
    # it led epoch 2 from 1000 and wrote to 5000; the group moved to epoch 3 at 3000
    assert truncate_point([(1, 0), (2, 1000)], [(1, 0), (2, 1000), (3, 3000)], 5000) == 3000
    # it wrote less than the group kept of its epoch: nothing to cut
    assert truncate_point([(1, 0), (2, 1000)], [(1, 0), (2, 1000), (3, 3000)], 2500) == 2500


def test_a_slave_that_followed_the_whole_history_is_not_cut() -> None:
    assert truncate_point([(1, 0), (3, 3000)], [(1, 0), (2, 1000), (3, 3000)], 9000) == 9000


def test_a_term_the_group_never_recorded_is_cut_at_its_start() -> None:
    # it believed it began epoch 3 at 4000; the group's epoch 3 began at 3000 elsewhere
    assert truncate_point([(1, 0), (3, 4000)], [(1, 0), (3, 3000)], 6000) == 3000


def test_with_no_shared_term_nothing_is_kept_and_a_fresh_replica_keeps_its_empty_log() -> None:
    assert truncate_point([(7, 0)], [(1, 0), (2, 500)], 900) == 0
    assert truncate_point([], [(1, 0)], 0) == 0
