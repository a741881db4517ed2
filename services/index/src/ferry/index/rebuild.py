"""Rebuilding the index from the CommitLog, beside the live one, and swapping them.

The rebuild reads the whole log (StoreReadLogRequest) into `index/rebuild/` while the live index
keeps following the feed and answering queries. When the read reaches the log's end, the live
files are deleted (newest first) and the rebuilt ones moved in (oldest first): a crash at any
point leaves a consistent set of files that resumes from its own `applied`, and a rebuild
directory found at start-up is an abandoned rebuild, deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ferry.index.follower import LogFollower
from ferry.index.index_store import Geometry, IndexStore
from ferry.runtime.files import fsync_dir
from ferry.runtime.offset_names import parse_file_name
from ferry.runtime.service import Peer, Service

log = logging.getLogger("ferry.index.rebuild")

REBUILD_DIR = "rebuild"


def index_file_paths(directory: Path) -> list[Path]:
    """The index files of a directory (and files moved aside as corrupt), oldest first."""
    out = [
        p
        for p in directory.iterdir()
        if parse_file_name(p.name.removesuffix(".corrupt")) is not None
    ]
    return sorted(out, key=lambda p: p.name)


def discard_abandoned(live_dir: Path) -> None:
    shutil.rmtree(live_dir / REBUILD_DIR, ignore_errors=True)


class Rebuild:
    def __init__(
        self,
        service: Service,
        store: Peer,
        live_dir: Path,
        geometry: Geometry,
        on_done: Callable[[Rebuild], None],
    ) -> None:
        self.directory = live_dir / REBUILD_DIR
        discard_abandoned(live_dir)
        self.index = IndexStore.open(self.directory, geometry)
        self.started = time.monotonic()
        self._on_done = on_done
        self.follower = LogFollower(
            service, store, self.index, name="rebuild", on_caught_up=self._caught_up
        )
        self.follower.catch_up()

    def _caught_up(self) -> None:
        self._on_done(self)

    def abandon(self) -> None:
        self.follower.stopped = True
        self.index.close(sync=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def install(self, live: IndexStore) -> IndexStore:
        """Replaces the live files by the rebuilt ones; returns the index to use from now on."""
        self.follower.stopped = True
        self.index.close()  # synced: the files are complete on disk before any live one goes
        live_dir = live.directory
        live.close(sync=False)
        for path in reversed(index_file_paths(live_dir)):
            path.unlink()
        fsync_dir(live_dir)
        for path in index_file_paths(self.directory):
            os.rename(path, live_dir / path.name)
        fsync_dir(live_dir)
        shutil.rmtree(self.directory, ignore_errors=True)
        installed = IndexStore.open(live_dir, live.geometry)
        installed.min_phys = live.min_phys
        log.info(
            "rebuild done in %.1f s: %d files, %d entries, applied %d",
            time.monotonic() - self.started,
            *installed.stats()[1:3],
            installed.applied,
        )
        return installed
