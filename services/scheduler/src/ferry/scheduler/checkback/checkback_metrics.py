"""The check-back's metrics (made only when metrics are on), read at collection from the
checker's table: half messages waiting for their transaction's end, checks made, discards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferry.runtime import metrics
from ferry.scheduler.checkback.checker import TransactionChecker

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class CheckbackMetrics:
    def __init__(
        self, checker: TransactionChecker, registry: CollectorRegistry | None = None
    ) -> None:
        registry = metrics.registry() if registry is None else registry
        metrics.observe(
            registry,
            metrics.HALF_MESSAGES,
            "gauge",
            "half messages whose transaction has not ended (the check backlog)",
            lambda: [(float(len(checker.table)), {})],
        )
        metrics.observe(
            registry,
            metrics.TRANSACTION_CHECKS,
            "counter",
            "transaction checks handed to remoting for a producer of the group",
            lambda: [(float(checker.checks_sent), {})],
        )
        metrics.observe(
            registry,
            metrics.TRANSACTION_DISCARDED,
            "counter",
            "half messages moved to TRANS_CHECK_MAX_TIME_TOPIC after transactionCheckMax checks",
            lambda: [(float(checker.discarded), {})],
        )
