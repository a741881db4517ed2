"""The epoch file of a broker in controller mode (RocketMQ's epochFileCheckpoint): one line
`<epoch> <startOffset>` per term of office a master of this group began, oldest first, as
this broker's CommitLog holds it.

A master appends its entry before it takes any write. A broker that comes back as a slave
compares its entries with the group's (the controller keeps them) and cuts its CommitLog where
the two histories part (`truncate_point`), so that it keeps nothing the group did not keep:
Kafka's leader epochs, in RocketMQ's file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from ferry.protocol.errors import ConfigError
from ferry.runtime.files import fsync_dir

FILE_NAME = "epochFileCheckpoint"
# a one-shot request to the store's next start: cut the CommitLog at the offset it holds
CUT_FILE = "truncateCommitLogTo"

Epoch = tuple[int, int]  # (epoch, CommitLog offset where it began)


def load(root: Path) -> list[Epoch]:
    """The entries under storePathRootDir `root`, oldest first ([] without a file)."""
    path = root / FILE_NAME
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return []
    entries: list[Epoch] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ConfigError(f"{path}:{number}: not `<epoch> <startOffset>`: {line!r}")
        entries.append((int(parts[0]), int(parts[1])))
    check(entries, str(path))
    return entries


def check(entries: Sequence[Epoch], where: str = "epochs") -> None:
    """Epochs rise and start offsets never fall."""
    for (e1, s1), (e2, s2) in itertools.pairwise(entries):
        if e2 <= e1 or s2 < s1:
            raise ConfigError(f"{where}: epoch {e2}@{s2} does not follow {e1}@{s1}")


def save(root: Path, entries: Sequence[Epoch]) -> None:
    """Replaces the file atomically (write, fsync, rename, fsync the directory)."""
    check(entries, str(root / FILE_NAME))
    path = root / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.writelines(f"{epoch} {start}\n" for epoch, start in entries)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(root)


def append(root: Path, epoch: int, start: int) -> list[Epoch]:
    """Adds a term that begins at `start` (a new master's own); returns the entries."""
    entries = [e for e in load(root) if e[0] < epoch]
    entries.append((epoch, start))
    save(root, entries)
    return entries


def truncate_point(mine: Sequence[Epoch], group: Sequence[Epoch], my_end: int) -> int:
    """Where this broker's log must end to hold only what the group kept: the end of the last
    term both histories share (the group's next term's start, or this log's end), never past
    my_end. A log with no epochs (kept before controller mode) holds the history before the
    group's first term; with terms but none shared, nothing of it is the group's: 0."""
    groups = dict(group)
    shared = [(e, s) for e, s in mine if groups.get(e) == s]
    if not shared:
        return 0 if mine else min(my_end, group[0][1] if group else my_end)
    last_epoch = shared[-1][0]
    later = [s for e, s in group if e > last_epoch]
    end = later[0] if later else my_end
    mine_later = [s for e, s in mine if e > last_epoch]  # my own terms the group never had
    if mine_later:
        end = min(end, mine_later[0])
    return min(end, my_end)


def request_cut(root: Path, offset: int) -> None:
    """Asks the next start of the store under `root` to end its CommitLog at `offset`
    (ferry.store.truncation carries it out and removes the request)."""
    path = root / CUT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{offset}\n", encoding="ascii")
    os.replace(tmp, path)
    fsync_dir(root)


def read_cut(root: Path) -> int | None:
    path = root / CUT_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise ConfigError(f"{path} must hold one CommitLog offset, not {text!r}")
    return int(text)
