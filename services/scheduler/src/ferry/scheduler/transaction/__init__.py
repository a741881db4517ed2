"""Transaction checkback: half messages without an end are checked with a live producer of
their group (through remoting), up to transactionCheckMax times, then discarded.

TransactionChecker (checker.py) is the component the scheduler's app composes; it follows the
transaction queues on its own (queue_reader.py) and saves its own progress (progress.py).
"""

from ferry.scheduler.transaction.checker import CheckerSettings, TransactionChecker

__all__ = ["CheckerSettings", "TransactionChecker"]
