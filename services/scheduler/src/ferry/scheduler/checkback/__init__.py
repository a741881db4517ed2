"""Transaction check-back, a service of its own (`python -m ferry.scheduler.checkback`): half
messages without an end are checked with a live producer of their group (through remoting),
up to transactionCheckMax times, then discarded.

app.py runs one TransactionChecker (checker.py) on its own Service; the checker follows the
transaction queues (queue_reader.py) and saves its own progress (progress.py) under
<store>/checkback.
"""

from ferry.scheduler.checkback.checker import CheckerSettings, TransactionChecker

__all__ = ["CheckerSettings", "TransactionChecker"]
