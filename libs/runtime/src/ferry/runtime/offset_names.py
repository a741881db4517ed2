"""The names of the store's files that start at an offset: CommitLog segments, ConsumeQueue
files and index files are named by the 20 decimal digits of their first offset (RocketMQ's
UtilAll.offset2FileName). The store writes them; the log reader and the index find them."""

from __future__ import annotations

NAME_DIGITS = 20


def file_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"


def parse_file_name(name: str) -> int | None:
    """The offset a file name stands for, or None for files that are not ours."""
    if len(name) != NAME_DIGITS or not name.isdigit():
        return None
    return int(name)
