"""The one-shot cut of controller mode: a start with `truncateCommitLogTo` ends the log there,
drops the queue entries past it, removes the request, and later starts cut nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.errors import ConfigError
from ferry.store import truncation
from ferry.store.store import MessageStore

MakeBatch = Callable[..., bytes]
MakeConfig = Callable[..., Any]


def bodies(store: MessageStore, topic: str) -> list[bytes]:
    got = store.get(topic, 0, 0, max_msgs=100_000, max_bytes=1 << 30)
    if got.status != PullStatus.FOUND:
        return []
    return [r.body for r in record.iter_records(bytes(got.payload))]


def test_a_requested_cut_drops_the_tail_once_and_later_writes_stay(
    make_config: MakeConfig, batch: MakeBatch
) -> None:
    config = make_config()
    root = Path(config.store_path_root_dir)
    with MessageStore.open(config) as store:
        store.put("Cut", 0, 3, batch("Cut", [b"kept"] * 3))
        kept_end = store.status().max_offset
        store.put("Cut", 0, 2, batch("Cut", [b"dropped"] * 2))
    truncation.request(root, kept_end)
    with MessageStore.open(config) as store:
        assert store.status().max_offset == kept_end
        assert bodies(store, "Cut") == [b"kept"] * 3
        assert not (root / truncation.FILE_NAME).exists()
        store.put("Cut", 0, 1, batch("Cut", [b"after"]))
    with MessageStore.open(config) as store:  # the request is gone: nothing is cut again
        assert bodies(store, "Cut") == [b"kept"] * 3 + [b"after"]


def test_a_damaged_request_is_a_config_error(make_config: MakeConfig) -> None:
    config = make_config()
    root = Path(config.store_path_root_dir)
    root.mkdir(parents=True, exist_ok=True)
    (root / truncation.FILE_NAME).write_text("twelve")
    with pytest.raises(ConfigError, match="one CommitLog offset"):
        MessageStore.open(config)
