"""docs/protocol.md must describe every request and reply type on the wire."""

from pathlib import Path

from ferry.protocol.messages import reply_types, request_types, wire_tag

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def test_every_wire_type_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [
        t.__name__ for t in request_types() + reply_types() if f"`{wire_tag(t)}`" not in text
    ]
    assert missing == []
