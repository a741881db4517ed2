"""What MessageStore's writes and reads return: PutResult, GetResult, ReadLogResult."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ferry.protocol.codes import PullStatus


class PutResult(NamedTuple):
    queue_offset: int  # of the first record
    phys_offsets: list[int]
    from_offset: int  # log end before the put ...
    next_offset: int  # ... and after it: the bytes the dispatch feed announces
    written: bytearray | None = None  # those bytes, when one write stored them all


@dataclass(frozen=True, slots=True)
class GetResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    count: int = 0
    payload: memoryview | bytes = b""
    runs: list[tuple[int, int]] | None = None  # [start, stop) log ranges of the records


class ReadLogResult(NamedTuple):
    from_offset: int
    next_offset: int
    min_offset: int
    max_offset: int
    payload: memoryview | bytes
