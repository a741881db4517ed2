"""A log line that a flood of bad input cannot turn into a flood of log lines.

A peer sending garbage as fast as it can must not fill the disk with one warning per frame,
nor cost the loop a formatted line per frame: the first few in each interval are logged, the
rest counted, and the count is written with the next line that gets through.
"""

from __future__ import annotations

import logging
import time
from typing import Any

INTERVAL_S = 10.0
BURST = 10  # lines let through per interval


class Gate:
    """Lets `burst` events through per `interval_s`, counting the rest."""

    def __init__(self, interval_s: float = INTERVAL_S, burst: int = BURST) -> None:
        self._interval_s = interval_s
        self._burst = burst
        self._window_start = float("-inf")
        self._in_window = 0
        self.suppressed = 0  # events held back since the last one let through
        self.total = 0

    def admit(self) -> bool:
        self.total += 1
        now = time.monotonic()
        if now - self._window_start >= self._interval_s:
            self._window_start = now
            self._in_window = 0
        if self._in_window >= self._burst:
            self.suppressed += 1
            return False
        self._in_window += 1
        return True


class ThrottledLog:
    """Per-interval rate limit on one kind of log line (bad frames, dropped feed messages)."""

    def __init__(
        self, logger: logging.Logger, *, interval_s: float = INTERVAL_S, burst: int = BURST
    ) -> None:
        self._log = logger
        self.gate = Gate(interval_s, burst)

    @property
    def total(self) -> int:
        return self.gate.total

    def warning(self, msg: str, *args: Any) -> None:
        self._emit(logging.WARNING, msg, args, False)

    def error(self, msg: str, *args: Any) -> None:
        self._emit(logging.ERROR, msg, args, False)

    def exception(self, msg: str, *args: Any) -> None:
        """An ERROR line with the traceback (only for lines that get through)."""
        self._emit(logging.ERROR, msg, args, True)

    def _emit(self, level: int, msg: str, args: tuple[Any, ...], exc_info: bool) -> None:
        if not self.gate.admit():
            return
        if self.gate.suppressed:
            msg += " (%d more like it not logged)"
            args = (*args, self.gate.suppressed)
            self.gate.suppressed = 0
        self._log.log(level, msg, *args, exc_info=exc_info)


class ThrottleFilter(logging.Filter):
    """The same limit on another library's log lines that start with one of `messages` (a
    web server's line per malformed request)."""

    def __init__(
        self, messages: tuple[str, ...], *, interval_s: float = INTERVAL_S, burst: int = BURST
    ) -> None:
        super().__init__()
        self._messages = messages
        self.gate = Gate(interval_s, burst)

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self._messages):
            return True
        return self.gate.admit()
