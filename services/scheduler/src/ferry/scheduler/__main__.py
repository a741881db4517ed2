"""`ferry-scheduler -c broker.conf [--set key=value ...]`: the broker's scheduler service."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.runtime.cli import run_service
from ferry.runtime.dir_lock import DirLockedError
from ferry.scheduler.app import SERVICE_NAME, SchedulerApp
from ferry.scheduler.config import SchedulerConfig

PROG = "ferry-scheduler"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        SchedulerConfig,
        lambda config: SchedulerApp(config).run(),
        argv,
        expected=(DirLockedError,),
    )


if __name__ == "__main__":
    main()
