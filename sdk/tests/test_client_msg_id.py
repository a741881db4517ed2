"""Client-generated message ids (UNIQ_KEY)."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

from ferry.client.msg_id import MessageIdGenerator, month_start_ms

HEX32 = re.compile(r"^[0-9A-F]{32}$")


def test_ids_are_32_upper_hex_digits_with_ip_and_pid_first() -> None:
    gen = MessageIdGenerator("10.1.2.3", pid=0x1234)
    msg_id = gen.next_id()
    assert HEX32.match(msg_id)
    assert msg_id.startswith("0A010203" + "1234")


def test_time_field_counts_ms_since_the_start_of_the_month() -> None:
    gen = MessageIdGenerator("127.0.0.1")
    before = int(time.time() * 1000)
    msg_id = gen.next_id()
    after = int(time.time() * 1000)
    start, _ = month_start_ms(before)
    delta = int(msg_id[20:28], 16)
    assert before - start <= delta <= after - start


def test_month_start_is_the_first_day_at_midnight_utc() -> None:
    moment = dt.datetime(2024, 12, 31, 23, 59, tzinfo=dt.UTC)
    start, following = month_start_ms(int(moment.timestamp() * 1000))
    assert start == int(dt.datetime(2024, 12, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert following == int(dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)


def test_ids_are_unique_across_threads() -> None:
    gen = MessageIdGenerator("127.0.0.1")

    def many(_: int) -> list[str]:
        return [gen.next_id() for _ in range(5000)]

    with ThreadPoolExecutor(8) as pool:
        ids = [i for chunk in pool.map(many, range(8)) for i in chunk]
    assert len(set(ids)) == len(ids) == 40_000


def test_two_generators_of_one_process_do_not_collide() -> None:
    first = MessageIdGenerator("127.0.0.1", pid=os.getpid())
    second = MessageIdGenerator("127.0.0.1", pid=os.getpid())
    assert first.prefix != second.prefix
    assert {first.next_id() for _ in range(100)}.isdisjoint(second.next_id() for _ in range(100))
