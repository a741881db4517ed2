"""Java .properties parsing, the format of RocketMQ's broker.conf."""

from __future__ import annotations

from pathlib import Path


def parse_properties(text: str) -> dict[str, str]:
    """key=value or key: value lines; '#' and '!' comments; trailing backslash continues a line.

    Values keep inner spaces; a trailing comment after a value (as in the seed's
    `brokerIP1=xx #note`) is stripped, since RocketMQ values never contain ' #'.
    """
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        key, value = _split(line)
        if " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    if pending:
        key, value = _split(pending)
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    for i, ch in enumerate(line):
        if ch in "=:":
            return line[:i].strip(), line[i + 1 :].strip()
        if ch.isspace():
            rest = line[i:].lstrip()
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
            return line[:i].strip(), rest.strip()
    return line.strip(), ""


def read_properties(path: str | Path) -> dict[str, str]:
    return parse_properties(Path(path).read_text(encoding="utf-8"))
