"""`ferry-checkback -c broker.conf [--set key=value ...]`: the broker's transaction check-back
service (`python -m ferry.scheduler.checkback`)."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.runtime.cli import run_service
from ferry.runtime.dir_lock import DirLockedError
from ferry.scheduler.checkback.app import SERVICE_NAME, CheckbackApp
from ferry.scheduler.checkback.config import CheckbackConfig

PROG = "ferry-checkback"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        CheckbackConfig,
        lambda config: CheckbackApp(config).run(),
        argv,
        expected=(DirLockedError,),
    )


if __name__ == "__main__":
    main()
