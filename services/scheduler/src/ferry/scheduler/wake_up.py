"""WakeUp: one pending call at the earliest time asked for, for the delay levels and the
timers, which sleep until their next message is due."""

from __future__ import annotations

import time
from collections.abc import Callable

from ferry.runtime.service import Service


class WakeUp:
    def __init__(self, service: Service, fn: Callable[[], None]) -> None:
        self._service = service
        self._fn = fn
        self._at = 0.0  # monotonic time of the call already scheduled (0: none)

    def after_ms(self, in_ms: int) -> None:
        at = time.monotonic() + in_ms / 1000
        if self._at and self._at <= at:
            return  # an earlier call is already scheduled
        self._at = at

        def fire() -> None:
            if self._at == at:  # not overtaken by an earlier one
                self._at = 0.0
                self._fn()

        self._service.later(in_ms / 1000, fire)
