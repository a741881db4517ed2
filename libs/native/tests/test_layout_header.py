"""The C units' record layout (record_layout.h) against the Python one it is generated from
(ferry.protocol.record_layout): a change on one side only fails here."""

from __future__ import annotations

import importlib.util
import re
import struct
from pathlib import Path
from types import ModuleType

from ferry.protocol import record, record_layout

NATIVE = Path(__file__).parents[1]
SRC = NATIVE / "src" / "ferry" / "native"
_DEFINE = re.compile(r"^#define\s+([A-Z_][A-Z0-9_]*)\s+(0x[0-9A-Fa-f]+|\d+)u?\b", re.M)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_layout", NATIVE / "gen_layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _defines(path: Path) -> dict[str, int]:
    return {name: int(value, 0) for name, value in _DEFINE.findall(path.read_text())}


def test_the_checked_in_header_is_what_the_python_layout_generates() -> None:
    # after a change to record_layout.py: uv run python libs/native/gen_layout.py
    assert (SRC / "record_layout.h").read_text() == _generator().render()


def test_the_header_values_are_the_python_layout() -> None:
    found = _defines(SRC / "record_layout.h")
    for field in record_layout.HEAD_FIELDS.values():
        name = "OFF_" + _generator()._FIELD_NAMES[field.name]
        assert found.pop(name) == field.offset, name
    for name in ("OFF_BODY", "HOST_SIZE", "TOPIC_LEN_SIZE", "TAIL_SIZE", "FIXED_SIZE"):
        assert found.pop(name) == getattr(record_layout, name), name
    for name in ("CRC_START", "MAX_PROPS_BYTES", "MAGIC", "BLANK_MAGIC", "BLANK_MIN"):
        assert found.pop(name) == getattr(record_layout, name), name
    for name in ("SYSFLAG_COMPRESSED", "SYSFLAG_TX_ROLLBACK", "CQ_ENTRY_SIZE"):
        assert found.pop(name) == getattr(record_layout, name), name
    assert found.pop("PROPS_LEN_SIZE") == record_layout.PROPS_LEN.size
    assert found.pop("CQ_OFF_SIZE") == record_layout.CQ_ENTRY_FIELDS["size"]
    assert found.pop("CQ_OFF_TAGS") == record_layout.CQ_ENTRY_FIELDS["tags_code"]
    assert found == {}, "constants the test does not compare"


def test_no_other_c_file_defines_a_layout_constant() -> None:
    layout = set(_defines(SRC / "record_layout.h"))
    for path in sorted(SRC.glob("*.[ch]")):
        if path.name != "record_layout.h":
            assert not layout & set(_defines(path)), path.name


def test_the_header_offsets_read_a_record_the_codec_wrote() -> None:
    h = _defines(SRC / "record_layout.h")
    raw = bytearray(
        record.encode_record(
            b"T",
            b"body",
            record.encode_properties({"K": "v"}),
            flag=7,
            sysflag=record.SYSFLAG_COMPRESSED,
            born_timestamp=123,
            born_host=record.pack_host("10.1.2.3:9876"),
            reconsume_times=2,
            prepared_tx_offset=99,
            queue_id=3,
        )
    )
    record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, 5, 4096)
    record.STORE_STAMP.pack_into(raw, record.OFF_STORE_STAMP, 456, record.pack_host("1.2.3.4:1"))

    def at(name: str, fmt: str) -> int:
        return int(struct.unpack_from(">" + fmt, raw, h[name])[0])

    assert at("OFF_TOTAL_SIZE", "i") == len(raw)
    assert at("OFF_MAGIC", "I") == h["MAGIC"]
    assert at("OFF_QUEUE_ID", "i") == 3
    assert at("OFF_FLAG", "i") == 7
    assert at("OFF_QUEUE_OFFSET", "q") == 5
    assert at("OFF_PHYS_OFFSET", "q") == 4096
    assert at("OFF_SYSFLAG", "i") & h["SYSFLAG_COMPRESSED"]
    assert at("OFF_BORN_TIMESTAMP", "q") == 123
    assert raw[h["OFF_BORN_HOST"] : h["OFF_BORN_HOST"] + h["HOST_SIZE"]] == record.pack_host(
        "10.1.2.3:9876"
    )
    assert at("OFF_STORE_TIMESTAMP", "q") == 456
    assert at("OFF_RECONSUME_TIMES", "i") == 2
    assert at("OFF_PREPARED_TX_OFFSET", "q") == 99
    assert at("OFF_BODYLEN", "i") == 4
    assert raw[h["OFF_BODY"] : h["OFF_BODY"] + 4] == b"body"
    assert len(raw) == h["FIXED_SIZE"] + len(b"body") + len(b"T") + len(b"K\x01v\x02")
