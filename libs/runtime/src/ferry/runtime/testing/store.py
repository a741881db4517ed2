"""A broker-store process alone, on free ports, as the store's and the index's tests start it."""

from __future__ import annotations

from pathlib import Path

from ferry.runtime.launcher import ServiceProcess, service_args, start_service

FREE_PORT = "tcp://127.0.0.1:0"


def store_settings(root: Path | str, **settings: str) -> dict[str, str]:
    """The store's settings on `root`, its request and feed endpoints on free ports, then
    `settings` (which win)."""
    return {
        "storePathRootDir": str(root),
        "storeEndpoint": FREE_PORT,
        "storeFeedEndpoint": FREE_PORT,
        **settings,
    }


def start_store(root: Path | str, **settings: str) -> ServiceProcess:
    """broker-store on store_settings(root, **settings), once it has said READY."""
    return start_service("broker-store", service_args(None, store_settings(root, **settings)))
