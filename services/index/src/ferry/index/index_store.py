"""IndexStore: the index files of one directory, fed CommitLog records, asked for keys.

A plain object (no sockets, no timers): app.py drives it from the service loop and the tests
drive it directly. Files are named by the CommitLog offset of their first record and rolled by
entry count: a record's keys never straddle two files, and a full file is committed and synced
before the next one exists, so that after any crash only the newest file can be incomplete.
The CommitLog offset below which every record is indexed (`applied`) is committed with the
entries, in the newest file's header: that is where indexing resumes after a restart.
"""

from __future__ import annotations

import logging
import operator
from pathlib import Path
from typing import Any, NamedTuple

from ferry.index.index_file import Hit, IndexFile, IndexFileError
from ferry.index.keys import Indexed, indexed_records
from ferry.protocol import record
from ferry.runtime.files import fsync_dir
from ferry.runtime.offset_names import file_name, parse_file_name

log = logging.getLogger("ferry.index.store")
_HASHES = operator.itemgetter(2)

# store times are stamped by one store with time.time(): a walk down a chain stops once it
# reaches entries this much older than the start of the queried range
LOOKUP_SLACK_MS = 60_000


class Geometry(NamedTuple):
    slot_count: int
    max_entries: int


class IndexStats(NamedTuple):
    applied: int
    files: int
    entries: int
    first_phys: int  # -1 when empty
    last_store_ms: int  # -1 when empty


class IndexStore:
    def __init__(self, directory: Path, geometry: Geometry) -> None:
        self.directory = directory
        self.geometry = geometry
        self.files: list[IndexFile] = []
        self.applied = 0
        self.min_phys = 0  # the store's CommitLog starts here: older entries point nowhere

    @classmethod
    def open(cls, directory: Path, geometry: Geometry, *, drop_newest: bool = False) -> IndexStore:
        """Maps the directory's files, undoing what the last run wrote but did not commit.

        drop_newest (after a machine crash): the newest file may hold torn writes in any
        order, so it is deleted and re-indexed; older files were synced when they filled up.
        """
        directory.mkdir(parents=True, exist_ok=True)
        store = cls(directory, geometry)
        try:
            store._load(drop_newest)
        except BaseException:
            store.close(sync=False)
            raise
        return store

    def _load(self, drop_newest: bool) -> None:
        names = sorted(
            (start, p)
            for p in self.directory.iterdir()
            if (start := parse_file_name(p.name)) is not None
        )
        for _, path in names:
            try:
                self.files.append(IndexFile.open(path))
            except IndexFileError as exc:
                aside = path.with_name(path.name + ".corrupt")
                log.error("%s; moved aside to %s (a rebuild restores its keys)", exc, aside.name)
                path.rename(aside)
        if drop_newest and self.files:
            newest = self.files.pop()
            log.warning("unclean machine stop: %s is re-indexed from the CommitLog", newest.path)
            self._delete(newest)
        while self.files and self.files[-1].count == 0:  # created, never committed
            self._delete(self.files.pop())
        self.applied = self.files[-1].applied if self.files else 0

    # ---- building ----

    def apply(self, buf: Any, next_offset: int, *, strict: bool = False) -> int:
        """Indexes the records of buf (whole records as they lie in the CommitLog) that lie at
        or past `applied`, then moves `applied` to next_offset and commits; returns how many
        keys were added. Records from one that does not decode on are logged and passed over,
        or, when strict, nothing is applied and RecordError is raised (the caller reads the
        log instead)."""
        try:
            added = self._add_records(buf, next_offset, strict)
        except BaseException:
            self._roll_back()
            raise
        self.applied = max(self.applied, next_offset)
        if self.files:
            self.files[-1].commit(self.applied)
        return added

    def _add_records(self, buf: Any, next_offset: int, strict: bool) -> int:
        try:
            found = indexed_records(buf)
        except (record.RecordError, UnicodeDecodeError, ValueError) as exc:
            if strict:
                raise record.RecordError(f"records before {next_offset}: {exc}") from None
            log.error(
                "records before %d do not decode (%s); their keys are not indexed",
                next_offset,
                exc,
            )
            found = _decodable_prefix(buf)
        skip_below = self.applied
        if found and found[0][0] < skip_below:
            found = [rec for rec in found if rec[0] >= skip_below]
        current = self.files[-1] if self.files else None
        total = sum(map(len, map(_HASHES, found)))  # C-level: no Python frame per record
        if current is not None and total <= current.free:  # all in the current file
            if found:
                current.put_records(found, total)
            return total
        added = 0
        cap = self.geometry.max_entries
        free = current.free if current is not None else 0
        batch: list[Indexed] = []  # records for `current`, written together
        for whole in found:
            rec = whole
            n = len(rec[2])
            if n > cap:
                log.warning("record at %d has %d keys; %d are indexed", rec[0], n, cap)
                rec = (rec[0], rec[1], rec[2][:cap])
                n = cap
            if current is None or n > free:
                if batch and current is not None:
                    current.put_records(batch)
                    batch = []
                current = self._roll(rec[0])
                free = current.free
            batch.append(rec)
            free -= n
            added += n
        if batch and current is not None:
            current.put_records(batch)
        return added

    def _roll_back(self) -> None:
        """After a failed apply (a full disk): back to what the files have committed, so that
        the records are applied again later, once."""
        if not self.files:
            return
        newest = self.files[-1]
        newest.undo_uncommitted()
        if newest.count == 0 and newest.header.seq == 0:
            self._delete(self.files.pop())
        if self.files:
            self.applied = self.files[-1].applied

    def reset(self) -> None:
        """Deletes every file: indexing starts again from the log's beginning."""
        while self.files:
            self._delete(self.files.pop())
        self.applied = 0

    def _roll(self, phys_offset: int) -> IndexFile:
        if self.files:
            full = self.files[-1]
            full.commit(phys_offset)  # every record before this one is in it
            full.sync()
        new = IndexFile.create(self.directory / file_name(phys_offset), *self.geometry)
        fsync_dir(self.directory)
        self.files.append(new)
        return new

    # ---- retention ----

    def delete_below(self, min_offset: int) -> int:
        """Deletes the files whose records all lie below min_offset (the CommitLog's start);
        the newest file stays, it carries `applied`. Returns how many were deleted."""
        self.min_phys = max(self.min_phys, min_offset)
        deleted = 0
        while len(self.files) > 1 and self.files[0].applied <= min_offset:
            self._delete(self.files.pop(0))
            deleted += 1
        return deleted

    def _delete(self, index: IndexFile) -> None:
        index.close()
        index.path.unlink(missing_ok=True)
        fsync_dir(self.directory)

    # ---- queries ----

    def query(self, key_hash: int, begin_ms: int, end_ms: int, limit: int) -> list[Hit]:
        """Entries of key_hash stored within [begin_ms, end_ms], newest first, at most limit."""
        out: list[Hit] = []
        for index in reversed(self.files):
            if len(out) >= limit:
                break
            if index.overlaps(begin_ms, end_ms):
                index.lookup(
                    key_hash,
                    begin_ms,
                    end_ms,
                    limit,
                    out,
                    min_phys=self.min_phys,
                    slack_ms=LOOKUP_SLACK_MS,
                )
        return out

    def stats(self) -> IndexStats:
        return IndexStats(
            applied=self.applied,
            files=len(self.files),
            entries=sum(f.count for f in self.files),
            first_phys=self.files[0].begin_phys if self.files else -1,
            last_store_ms=max((f.end_ms for f in self.files), default=-1),
        )

    # ---- durability ----

    def sync(self) -> None:
        for index in self.files:
            index.sync()

    def close(self, *, sync: bool = True) -> None:
        files, self.files = self.files, []
        for index in files:
            try:
                if sync:
                    index.sync()
            finally:
                index.close()


def _decodable_prefix(buf: Any) -> list[Indexed]:
    """The records before the first one that does not decode (found record by record)."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[Indexed] = []
    pos = 0
    while pos < len(data):
        size = (
            record.PREFIX.unpack_from(data, pos)[0] if len(data) - pos >= record.PREFIX.size else 0
        )
        if size <= 0:
            break
        try:
            out.extend(indexed_records(data[pos : pos + size]))
        except (record.RecordError, UnicodeDecodeError, ValueError):
            break
        pos += size
    return out
