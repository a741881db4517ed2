"""The check-back takes over the progress an older Ferry's scheduler saved for it, once."""

from __future__ import annotations

from pathlib import Path

from ferry.scheduler.checkback import progress
from ferry.scheduler.checkback.app import adopt_old_progress
from ferry.scheduler.checkback.config import CheckbackConfig


def config(root: Path) -> CheckbackConfig:
    return CheckbackConfig(store_path_root_dir=str(root), store_endpoint="tcp://127.0.0.1:1")


def test_the_schedulers_saved_progress_is_taken_over_once(tmp_path: Path) -> None:
    conf = config(tmp_path)
    saved = progress.Progress({"RMQ_SYS_TRANS_HALF_TOPIC": 7}, {"pending": []})
    progress.save(conf.scheduler_dir_of_old, saved)
    conf.checkback_dir.mkdir(parents=True)
    adopt_old_progress(conf)
    assert progress.load(conf.checkback_dir).offsets == {"RMQ_SYS_TRANS_HALF_TOPIC": 7}
    assert not (conf.scheduler_dir_of_old / progress.FILE_NAME).exists()
    # a newer state of its own is never replaced by an old one left behind
    progress.save(conf.scheduler_dir_of_old, progress.Progress({"RMQ_SYS_TRANS_HALF_TOPIC": 1}))
    adopt_old_progress(conf)
    assert progress.load(conf.checkback_dir).offsets == {"RMQ_SYS_TRANS_HALF_TOPIC": 7}
