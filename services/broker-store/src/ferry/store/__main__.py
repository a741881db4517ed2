"""`ferry-broker-store -c broker.conf --set key=value`: the broker's store process."""

from __future__ import annotations

from collections.abc import Sequence

from ferry.runtime.cli import run_service
from ferry.runtime.dir_lock import DirLockedError
from ferry.store.app import SERVICE_NAME, run
from ferry.store.config import StoreConfig

PROG = "ferry-broker-store"


def main(argv: Sequence[str] | None = None) -> None:
    run_service(PROG, SERVICE_NAME, StoreConfig, run, argv, expected=(DirLockedError,))


if __name__ == "__main__":
    main()
