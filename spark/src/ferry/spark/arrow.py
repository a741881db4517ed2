"""Arrow arrays built straight from buffers. pa.array() imports pandas the first time it runs
(0.7 s in every fresh Spark Python worker, on the way to a read's first row) although no row
here needs it; these builders use only Array.from_buffers, which does not."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from itertools import accumulate, chain
from typing import cast

import numpy as np
import pyarrow as pa


def _offsets(lengths: Sequence[int]) -> pa.Buffer:
    """int32 offsets of consecutive items (Arrow's string, binary, list and map layout)."""
    offsets = array("i", [0])
    offsets.extend(accumulate(lengths))
    return pa.py_buffer(offsets.tobytes())


def _validity(values: Sequence[object]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap (bit i set: value i is not None), None when all are valid; and the
    null count."""
    if None not in values:
        return None, 0
    valid = np.fromiter((v is not None for v in values), dtype=np.bool_, count=len(values))
    bitmap = np.packbits(valid, bitorder="little")
    return pa.py_buffer(bitmap.tobytes()), len(values) - int(valid.sum())


def integers(values: Sequence[int], type: pa.DataType) -> pa.Array:
    """int32 or int64 (timestamp types included: their values are int64)."""
    code = "i" if type.bit_width == 32 else "q"
    data = pa.py_buffer(array(code, values).tobytes())
    return pa.Array.from_buffers(type, len(values), [None, data])


def binaries(values: Sequence[bytes | None], type: pa.DataType) -> pa.Array:
    """binary, or string from UTF-8 bytes; None for null."""
    validity, nulls = _validity(values)
    present = [b"" if v is None else v for v in values] if nulls else cast(Sequence[bytes], values)
    data = pa.py_buffer(b"".join(present))
    buffers = [validity, _offsets(list(map(len, present))), data]
    return pa.Array.from_buffers(type, len(values), buffers, null_count=nulls)


def strings(values: Sequence[str | None], type: pa.DataType) -> pa.Array:
    if None not in values:
        present = cast(Sequence[str], values)
        joined = "".join(present)
        if joined.isascii():  # the usual case: one encode, and lengths in bytes are len()
            buffers = [None, _offsets(list(map(len, present))), pa.py_buffer(joined.encode())]
            return pa.Array.from_buffers(type, len(values), buffers)
    return binaries([None if v is None else v.encode() for v in values], type)


def string_lists(values: Sequence[Sequence[str]], type: pa.ListType) -> pa.Array:
    """list<string>, no null lists."""
    flat = strings(list(chain.from_iterable(values)), type.value_type)
    offsets = _offsets(list(map(len, values)))
    return pa.Array.from_buffers(type, len(values), [None, offsets], children=[flat])


def string_maps(values: Sequence[Mapping[str, str]], type: pa.MapType) -> pa.Array:
    """map<string,string>, no null maps or values."""
    keys = strings(list(chain.from_iterable(m.keys() for m in values)), type.key_type)
    items = strings(list(chain.from_iterable(m.values() for m in values)), type.item_type)
    entries_type = pa.struct([type.key_field, type.item_field])
    entries = pa.Array.from_buffers(entries_type, len(keys), [None], children=[keys, items])
    offsets = _offsets(list(map(len, values)))
    return pa.Array.from_buffers(type, len(values), [None, offsets], children=[entries])
