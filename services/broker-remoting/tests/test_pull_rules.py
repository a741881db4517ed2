from ferry.remoting.pull import effective_suspend_ms


def test_suspend_is_passed_through_and_capped_at_30_seconds() -> None:
    assert effective_suspend_ms(15_000, long_polling=True) == 15_000
    assert effective_suspend_ms(120_000, long_polling=True) == 30_000
    assert effective_suspend_ms(-5, long_polling=True) == 0


def test_no_hold_without_long_polling() -> None:
    assert effective_suspend_ms(15_000, long_polling=False) == 0
