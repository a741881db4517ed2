"""What the scheduler's app composes: background parts with a start, a stop and a status."""

from __future__ import annotations

from typing import Protocol


class Component(Protocol):
    name: str

    def start(self) -> None:
        """Called once the start-up check of the log is done (see app.py)."""

    def stop(self) -> None:
        """Called on a clean stop, before the progress is saved for the last time."""

    def status(self) -> dict[str, str]:
        """name -> value pairs for SchedulerStatusReply.extra (and remoting's runtime info)."""
