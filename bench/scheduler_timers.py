"""The scheduler on a local cluster: timer precision, delay-level precision, delivery rate.

    uv run python bench/scheduler_timers.py [--runs 3] [--timers 10000] [--spread 5]

Per run: `--timers` timer messages due over `--spread` seconds (sent with send_async before
the first is due) and their lateness (delivered copy's store time - due time) p50/p99/max;
the same number of level-1 delayed messages (messageDelayLevel "1s 2s 3s") sent as fast as
possible and their lateness past store time + 1 s; and the delivery rate of that burst.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 256
WAVE = 500  # sends in flight at once (unbatched: each is one request)


def now_ms() -> int:
    return int(time.time() * 1000)


def drain(namesrv: str, group: str, topic: str, want: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    with PullConsumer(
        group, namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET, pull_batch_size=256
    ) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + 180
        while len(got) < want and time.monotonic() < deadline:
            got += consumer.poll(timeout=1.0)
    return got


def timers(namesrv: str, topic: str, count: int, spread_ms: int) -> list[int]:
    due: dict[str, int] = {}
    with Producer("bench-timer", namesrv) as producer:
        first = now_ms() + 3000 + count  # a head start for sending (about 1 ms per timer)
        for wave in range(0, count, WAVE):
            futures = []
            for i in range(wave, min(count, wave + WAVE)):
                at = first + i * spread_ms // count
                futures.append((at, producer.send_async(Message(topic, BODY, deliver_at_ms=at))))
            for at, future in futures:
                due[future.result(timeout=120).msg_id] = at
        if now_ms() > first:
            print(f"warning: sending ended {now_ms() - first} ms after the first due time")
    got = drain(namesrv, "bench-timer-reader", topic, count)
    # timers whose time had passed when the broker got them were ordinary sends: left out
    held = [m for m in got if "SCHEDULED_FROM" in m.properties]
    if len(held) < len(got):
        print(f"{len(got) - len(held)} timers were sent after their time (left out)")
    return sorted(m.store_timestamp - due[m.msg_id] for m in held)


def delays(namesrv: str, topic: str, count: int) -> tuple[list[int], float]:
    with Producer("bench-delay", namesrv) as producer:
        for wave in range(0, count, WAVE):
            futures = []
            for _ in range(min(WAVE, count - wave)):
                msg = Message(topic, BODY)
                msg.delay_level = 1
                futures.append(producer.send_async(msg))
            for future in futures:
                future.result(timeout=120)
    got = drain(namesrv, "bench-delay-reader", topic, count)
    # held record's store time is born time + a few ms; born time is what the copy keeps
    lateness = sorted(m.store_timestamp - m.born_timestamp - 1000 for m in got)
    stamps = sorted(m.store_timestamp for m in got)
    rate = len(got) / max((stamps[-1] - stamps[0]) / 1000, 0.001)
    return lateness, rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=5.0)
    args = parser.parse_args()
    p50s, p99s, maxes, d50s, d99s, rates = [], [], [], [], [], []
    for run in range(args.runs):
        with (
            tempfile.TemporaryDirectory() as data,
            start_local_cluster(data, overrides={"messageDelayLevel": "1s 2s 3s"}) as cluster,
        ):
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin:
                admin.create_topic("BenchTimer", 4, 4)
                admin.create_topic("BenchDelay", 4, 4)
            late = timers(namesrv, "BenchTimer", args.timers, int(args.spread * 1000))
            p50s.append(percentile(late, 0.5))
            p99s.append(percentile(late, 0.99))
            maxes.append(float(late[-1]))
            d_late, rate = delays(namesrv, "BenchDelay", args.timers)
            d50s.append(percentile(d_late, 0.5))
            d99s.append(percentile(d_late, 0.99))
            rates.append(rate)
            print(
                f"run {run + 1}: timers p50 {p50s[-1]:.0f} ms p99 {p99s[-1]:.0f} ms "
                f"max {maxes[-1]:.0f} ms; level 1 p50 {d50s[-1]:.0f} ms "
                f"p99 {d99s[-1]:.0f} ms; {rate:,.0f} deliveries/s"
            )
    n = f"{args.timers:,}"
    report(
        "scheduler",
        [
            Figure(f"{n} timers over {args.spread:g} s: lateness p50", "ms", p50s),
            Figure(f"{n} timers over {args.spread:g} s: lateness p99", "ms", p99s),
            Figure(f"{n} timers over {args.spread:g} s: lateness max", "ms", maxes),
            Figure(f"{n} level-1 delays in a burst: lateness p50", "ms", d50s),
            Figure(f"{n} level-1 delays in a burst: lateness p99", "ms", d99s),
            Figure("level-1 burst delivered", "msg/s", rates),
        ],
    )


if __name__ == "__main__":
    main()
