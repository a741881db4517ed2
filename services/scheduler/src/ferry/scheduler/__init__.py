"""Ferry scheduler service: delay levels, timers, retry and DLQ; and, a process of its own,
transaction check-back (checkback/)."""
