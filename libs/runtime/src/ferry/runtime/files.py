"""File-system steps the services share: making a directory's new or removed entries durable,
and JSON state files replaced atomically.

A crash while writing a state file leaves either the old file or the new one, never a torn
mix: the new content goes to a temporary file that is fsynced, then renamed over the old one,
and the directory is fsynced so that the rename itself survives a power loss.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ferry.protocol.errors import ConfigError

T = TypeVar("T")

TMP_SUFFIX = ".tmp"


class StateFileError(ConfigError):
    """A state file that exists but cannot be read; the service refuses to start over it."""


def fsync_dir(path: Path) -> None:
    """Makes new or removed entries of a directory durable (a file's own fsync does not)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: the old file stays, no leftover
        raise
    fsync_dir(path.parent)


def save_json(path: Path, obj: Any) -> None:
    write_atomic(path, msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


def load_json(path: Path, type_: type[T]) -> T | None:
    """The decoded file, or None when there is none (a leftover temporary file is ignored)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(f"cannot read {path}: {exc}") from None
    try:
        return msgspec.json.decode(raw, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StateFileError(
            f"{path} is not a valid state file ({exc}); repair or remove it"
        ) from None
