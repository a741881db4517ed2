"""FeedCache: recent feed payloads answer a slave only from a chunk boundary, and a gap in
the feed starts the cache over instead of serving bytes it does not have."""

from __future__ import annotations

from ferry.ha.feed_cache import FeedCache


def test_contiguous_chunks_are_served_together_from_a_chunk_start() -> None:
    cache = FeedCache()
    cache.add(0, 10, b"a" * 10)
    cache.add(10, 15, b"b" * 5)
    assert cache.take(0, 1 << 20) == (15, b"a" * 10 + b"b" * 5)
    assert cache.take(10, 1 << 20) == (15, b"b" * 5)
    assert cache.take(0, 12) == (10, b"a" * 10)  # whole chunks, at least one
    assert cache.take(5, 100) is None  # inside a chunk: the store must answer
    assert cache.take(15, 100) is None  # nothing past the end


def test_a_gap_in_the_feed_starts_the_cache_over() -> None:
    cache = FeedCache()
    cache.add(0, 10, b"a" * 10)
    cache.add(20, 30, b"c" * 10)  # notices for [10, 20) were lost
    assert cache.take(0, 100) is None
    assert cache.take(20, 100) == (30, b"c" * 10)


def test_the_cache_keeps_its_byte_limit_and_the_newest_chunk() -> None:
    cache = FeedCache(limit=25)
    for i in range(5):
        cache.add(i * 10, i * 10 + 10, bytes([i]) * 10)
    assert cache.size <= 25
    assert cache.take(40, 100) == (50, bytes([4]) * 10)
    assert cache.take(0, 100) is None


def test_a_payload_that_does_not_match_its_notice_is_ignored() -> None:
    cache = FeedCache()
    cache.add(0, 10, b"short")
    assert cache.take(0, 100) is None
