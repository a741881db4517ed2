"""The progress snapshot: replaced atomically, read back as written."""

from __future__ import annotations

from pathlib import Path

from ferry.scheduler.progress import Progress, load_progress, save_progress


def test_a_saved_snapshot_loads_back_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    assert load_progress(tmp_path) == Progress()
    snapshot = Progress(
        levels={1: 5, 3: 7}, timer_queue_offset=9, timer_read_ms=1000, scan_from=4096
    )
    save_progress(tmp_path, snapshot)
    save_progress(tmp_path, snapshot)
    assert load_progress(tmp_path) == snapshot
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]


def test_a_snapshot_from_before_save_times_loads(tmp_path: Path) -> None:
    (tmp_path / "progress.json").write_text('{"levels": {"1": 3}, "scan_from": 7}')
    progress = load_progress(tmp_path)
    assert (progress.levels, progress.scan_from, progress.saved_ms) == ({1: 3}, 7, 0)
