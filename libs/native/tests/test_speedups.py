"""The C building blocks against the standard library: CRC-32 and BLAKE2b-64."""

from __future__ import annotations

import hashlib
import os
import random
import zlib
from pathlib import Path

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
def test_folded_crc32_matches_zlib_at_every_length_and_alignment() -> None:
    # the PCLMULQDQ fold takes 64 bytes and more, in 16-byte blocks, zlib the tail: every
    # length around those steps, from every alignment of a 16-byte load
    data = random.Random(7).randbytes(700)
    for start in range(16):
        for size in range(400):
            chunk = data[start : start + size]
            assert native.crc32(chunk) == zlib.crc32(chunk), (start, size)


def _xpow_mod_p(n: int) -> int:
    """x^n mod P over GF(2), P being CRC-32's polynomial 0x104C11DB7."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r >> 32:
            r ^= 0x104C11DB7
    return r


def _reflected(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2)


def test_the_fold_constants_in_the_c_source_are_the_polynomials() -> None:
    # where the C's numbers come from: x^n mod P reflected and shifted by one, for folds of
    # 512 and 128 bits and the 64 -> 32 step, and Barrett's floor(x^64 / P) and P reflected
    source = (Path(native.__file__).parent / "record.c").read_text()
    wanted = [_reflected(_xpow_mod_p(n), 32) << 1 for n in (544, 480, 160, 96, 64)]
    q, a = 0, 1 << 64
    while a.bit_length() >= 33:
        shift = a.bit_length() - 33
        q |= 1 << shift
        a ^= 0x104C11DB7 << shift
    wanted += [_reflected(q, 33), _reflected(0x104C11DB7, 33)]
    for constant in wanted:
        assert f"0x{constant:09x}LL" in source, hex(constant)


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


def test_unfilled_is_a_writable_bytearray_of_the_size_asked() -> None:
    buf = native.unfilled(5000)
    assert type(buf) is bytearray and len(buf) == 5000
    buf[:] = b"x" * 5000
    assert bytes(buf) == b"x" * 5000
    assert native.unfilled(0) == bytearray()
    with pytest.raises(ValueError, match="negative"):
        native.unfilled(-1)
