"""The record batches a read yields, without Spark: built from buffers, they hold exactly what
pa.array() would have built, and building them does not import pandas."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa

from ferry.client import MessageExt, MessageQueue
from ferry.spark.rows import arrow_schema, to_batch


def messages() -> list[MessageExt]:
    return [
        MessageExt(
            "Orders",
            b"\x00body\xff" * i,
            tags=None if i % 3 == 0 else f"tag-{i}",
            keys=[f"k{j}é" for j in range(i % 4)],
            properties={f"p{j}": f"v{j}✓" for j in range(i % 3)},
            msg_id=f"ID{i:04d}",
            queue=MessageQueue("Orders", "broker-ä", i % 8),
            queue_offset=2**40 + i,
            born_timestamp=1_795_000_000_000 + i,
            store_timestamp=1_795_000_000_500 + i,
            broker_name="broker-ä",
        )
        for i in range(50)
    ]


def reference(msgs: list[MessageExt], schema: pa.Schema) -> pa.RecordBatch:
    """The batch as pa.array() builds it from plain Python values."""
    columns: list[Any] = [
        [m.topic for m in msgs],
        [m.broker_name for m in msgs],
        [m.queue.queue_id for m in msgs],
        [m.queue_offset for m in msgs],
        [m.msg_id for m in msgs],
        [m.tags for m in msgs],
        [m.keys for m in msgs],
        [m.body for m in msgs],
        [list(m.properties.items()) for m in msgs],
        [m.born_timestamp * 1000 for m in msgs],
        [m.store_timestamp * 1000 for m in msgs],
    ]
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def test_batches_hold_what_pa_array_would_build() -> None:
    schema = arrow_schema()
    msgs = messages()
    got = to_batch(msgs, schema)
    got.validate(full=True)
    assert got.schema == schema
    assert got.equals(reference(msgs, schema))
    assert got.column(5).null_count == 17  # tags of i % 3 == 0
    empty = to_batch([], schema)
    assert empty.num_rows == 0 and empty.equals(reference([], schema))


def test_building_a_batch_does_not_import_pandas() -> None:
    code = (
        "import sys\n"
        "from test_arrow_rows import messages\n"
        "from ferry.spark.rows import arrow_schema, to_batch\n"
        "to_batch(messages(), arrow_schema())\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=__file__.rsplit("/", 1)[0],
    )
    assert done.stdout.strip() == "False"
