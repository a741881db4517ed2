"""Shared fixtures: store configs on tmp_path with small files, and record batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.runtime.config import BrokerConfig
from ferry.store.store import MessageStore

SEGMENT = 64 * 1024
CQ_FILE = 20 * 50  # 50 entries per ConsumeQueue file, so queues span files too

MakeConfig = Callable[..., BrokerConfig]
MakeBatch = Callable[..., bytes]


@pytest.fixture
def make_config(tmp_path: Path) -> MakeConfig:
    def make(**overrides: Any) -> BrokerConfig:
        values: dict[str, Any] = {
            "store_path_root_dir": str(tmp_path / "store"),
            "mapped_file_size_commit_log": SEGMENT,
            "mapped_file_size_consume_queue": CQ_FILE,
            "listen_port": 10911,
        }
        values.update(overrides)
        return BrokerConfig(**values)

    return make


def encode_batch(
    topic: str,
    bodies: Sequence[bytes],
    *,
    tags: str | Sequence[str | None] | None = None,
    keys: Sequence[str] | None = None,
) -> bytes:
    """Records as a producer sends them, each with a UNIQ_KEY (and TAGS when given)."""
    out = []
    for i, body in enumerate(bodies):
        props = {record.PROPERTY_UNIQ_KEY: f"KEY{i:06d}"}
        tag = tags if isinstance(tags, str) or tags is None else tags[i]
        if tag is not None:
            props[record.PROPERTY_TAGS] = tag
        if keys is not None:
            props[record.PROPERTY_KEYS] = keys[i]
        out.append(
            record.encode_record(
                topic.encode(),
                body,
                record.encode_properties(props),
                born_timestamp=1_700_000_000_000 + i,
                born_host=record.pack_host("10.0.0.7:5555"),
                flag=7,
            )
        )
    return b"".join(out)


@pytest.fixture
def batch() -> MakeBatch:
    return encode_batch


@pytest.fixture
def store(make_config: MakeConfig) -> Iterator[MessageStore]:
    s = MessageStore.open(make_config())
    yield s
    s.close()


@pytest.fixture
def crash() -> Callable[[MessageStore], None]:
    return _crash


def _crash(store: MessageStore) -> None:
    """Drops a store the way a killed process does: nothing flushed, abort marker left,
    written pages kept (they are in the page cache), lock released."""
    store.log.close()
    store.queues.close()
    store.checkpoint.close()
    store.lock.release()
    store._closed = True
