"""File-system steps the services share: making a directory's new or removed entries durable."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Makes new or removed entries of a directory durable (a file's own fsync does not)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
