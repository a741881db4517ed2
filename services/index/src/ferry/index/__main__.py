"""`ferry-index -c broker.conf [--set key=value ...]`: the broker's index service."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.index.app import SERVICE_NAME, IndexApp
from ferry.index.config import IndexConfig
from ferry.runtime.cli import run_service
from ferry.runtime.dir_lock import DirLockedError

PROG = "ferry-index"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(
        PROG,
        SERVICE_NAME,
        IndexConfig,
        lambda config: IndexApp(config).run(),
        argv,
        expected=(DirLockedError,),
    )


if __name__ == "__main__":
    main()
