"""SQL92 filtering of gets (enablePropertyFilter): whether a queue's record matches a
subscription's filter, judged by the properties it holds in the CommitLog.

Unlike tags, properties are not in the ConsumeQueue, so each candidate record's property bytes
are read from the mapped log. Only the properties the filter names are looked up and decoded
(a record carries UNIQ_KEY, traceparent and more that no filter reads); the filter itself is
compiled once per text (ferry.protocol.sql_filter caches it). No bloom filter of properties:
see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.protocol import record
from ferry.protocol.sql_filter import compile_filter
from ferry.store.commit_log import CommitLog

RecordMatch = Callable[[int, int], bool]  # (log offset, size) -> keep

_END = 2  # record.PROP_END as a byte


def record_matcher(log: CommitLog, sql: str) -> RecordMatch:
    """A test of the record at (offset, size) against `sql`; raises SqlFilterError."""
    predicate, names = compile_filter(sql)
    keys = [(name, name.encode() + b"\x01") for name in sorted(names)]
    view = log.view
    properties_bytes = record.properties_bytes

    def match(phys: int, size: int) -> bool:
        raw = properties_bytes(view(phys, phys + size), 0, size)
        return predicate(named_values(raw, keys))

    return match


def named_values(raw: bytes, keys: list[tuple[str, bytes]]) -> dict[str, str]:
    """The values of the wanted properties found in encoded properties (key\\x01value\\x02...);
    keys: (name, b"name\\x01"). Values never hold \\x01 or \\x02, so a key is found only where
    one starts (at 0 or after \\x02), not inside a longer key."""
    out: dict[str, str] = {}
    for name, key in keys:
        i = raw.find(key)
        while i > 0 and raw[i - 1] != _END:
            i = raw.find(key, i + 1)
        if i >= 0:
            start = i + len(key)
            end = raw.find(b"\x02", start)
            out[name] = raw[start : end if end >= 0 else len(raw)].decode(errors="replace")
    return out


def warm_sql_filters() -> None:
    """Loads the SQL92 parser now (~0.1 s, lark's import and grammar), at start with
    enablePropertyFilter, rather than on the first SQL92 pull, which would hold the loop."""
    compile_filter("TRUE")
