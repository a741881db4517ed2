"""Consumer offsets kept in a local file, for BROADCASTING consumers (RocketMQ's
LocalFileOffsetStore): every member reads every queue, so the broker cannot hold one offset for
the group.

The file is `<dir>/<ip>@<instance_name>/<group>/offsets.json` (dir defaults to
~/.ferry_offsets), rewritten whole through a temporary file and a rename, so a crash leaves the
old or the new version, never a torn one. A file that does not parse is set aside
(`offsets.json.bad`) and the consumer starts as a new one, with a warning.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import msgspec

from ferry.client.message import MessageQueue

log = logging.getLogger("ferry.client.offsets")

DEFAULT_DIR = "~/.ferry_offsets"
FILE_NAME = "offsets.json"


class _Entry(msgspec.Struct, frozen=True):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


class _File(msgspec.Struct):
    group: str
    offsets: list[_Entry] = []


def offset_file(base_dir: str | Path | None, client_key: str, group: str) -> Path:
    root = Path(os.path.expanduser(str(base_dir if base_dir is not None else DEFAULT_DIR)))
    return root / client_key / group / FILE_NAME


def open_local_store(
    base_dir: str | Path | None, ip: str, instance_name: str, group: str
) -> LocalOffsetStore:
    """The loaded store of a broadcasting member, `<base_dir>/<ip>@<instance_name>/<group>`."""
    store = LocalOffsetStore(offset_file(base_dir, f"{ip}@{instance_name}", group), group)
    store.load()
    return store


class LocalOffsetStore:
    """Thread-safe; read() and update() work in memory, persist() writes the file."""

    def __init__(self, path: Path, group: str) -> None:
        self.path = path
        self.group = group
        self._lock = threading.Lock()
        self._offsets: dict[MessageQueue, int] = {}
        self._dirty = False

    def load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            state = msgspec.json.decode(raw, type=_File)
        except msgspec.DecodeError as exc:
            bad = self.path.with_name(FILE_NAME + ".bad")
            log.warning("%s does not parse (%s); set aside as %s", self.path, exc, bad.name)
            os.replace(self.path, bad)
            return
        with self._lock:
            for e in state.offsets:
                if e.offset >= 0:
                    self._offsets[MessageQueue(e.topic, e.broker_name, e.queue_id)] = e.offset

    def read(self, queue: MessageQueue) -> int | None:
        with self._lock:
            return self._offsets.get(queue)

    def update(self, queue: MessageQueue, offset: int) -> None:
        with self._lock:
            if self._offsets.get(queue) != offset:
                self._offsets[queue] = offset
                self._dirty = True

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            entries = [
                _Entry(q.topic, q.broker_name, q.queue_id, off)
                for q, off in sorted(self._offsets.items())
            ]
            self._dirty = False
        data = msgspec.json.format(msgspec.json.encode(_File(self.group, entries)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with self._lock:
                self._dirty = True  # try again next time
            raise
