"""Logging setup for a service's main(): one line per record on stderr."""

from __future__ import annotations

import logging
import os
import sys


def setup_logging(service: str, level: str | None = None) -> None:
    chosen = (level or os.environ.get("FERRY_LOG_LEVEL") or "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)-5s {service} %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, chosen, logging.INFO))
