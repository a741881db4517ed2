"""The C building blocks against the standard library: CRC-32 and BLAKE2b-64."""

from __future__ import annotations

import hashlib
import os
import random
import zlib

import pytest

from ferry import native

needs_c = pytest.mark.skipif(not native.BUILT, reason="the C extension is not built here")


def test_native_is_built_where_the_tests_run() -> None:
    # make install builds it; under CI a missing extension fails here instead of the suite
    # quietly testing only the Python loops
    if not native.BUILT:
        message = "ferry.native's C extension did not build (no C compiler or zlib headers?)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + ": the Python loops run")
    wanted = os.environ.get("FERRY_NATIVE", "1") != "0"
    assert native.ENABLED is wanted


@needs_c
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 15, 16, 100, 1024, 4097, 70_000])
def test_crc32_matches_zlib(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert native.crc32(data) == zlib.crc32(data)
    assert native.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])


@needs_c
@pytest.mark.parametrize(
    ("topic_len", "key_len"),
    # one block, exactly one full block (126 + 'K' + '#'), one byte over, several blocks
    [(1, 1), (5, 0), (126, 0), (63, 63), (126, 1), (127, 128), (200, 300), (255, 1000)],
)
def test_key_hash_matches_hashlib_blake2b(topic_len: int, key_len: int) -> None:
    rng = random.Random(topic_len * 1000 + key_len)
    topic, key = rng.randbytes(topic_len), rng.randbytes(key_len)
    for unique, space in ((False, b"K"), (True, b"U")):
        expected = hashlib.blake2b(space + topic + b"#" + key, digest_size=8).digest()
        assert native.key_hash(topic, key, unique) == int.from_bytes(expected, "little")
