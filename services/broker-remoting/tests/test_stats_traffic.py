"""statsAll's figures: totals since start and TPS over the sampled window."""

from __future__ import annotations

from ferry.remoting.stats import BrokerStats


def test_tps_is_the_growth_over_the_oldest_sample_kept() -> None:
    stats = BrokerStats()
    stats.count_put("T", 5)
    stats.sample(at=100.0)
    stats.count_put("T", 20)
    stats.count_get("g", "T", 10)
    puts, gets, window_ms = stats.traffic(at=110.0)
    assert window_ms == 10_000
    assert [(t.key, t.total, t.tps) for t in puts] == [(("T", ""), 25, 2.0)]
    assert [(t.key, t.total, t.tps) for t in gets] == [(("T", "g"), 10, 1.0)]


def test_samples_older_than_the_window_are_forgotten() -> None:
    stats = BrokerStats()
    for i in range(20):
        stats.count_put("T", 1)
        stats.sample(at=float(i))
    puts, _, window_ms = stats.traffic(at=20.0)
    assert window_ms == 12_000  # 12 samples kept: from t=8 on
    assert puts[0].tps == round((20 - 9) / 12, 2)  # 9 counted by the sample at t=8
