"""Errors of the Spark connector (they never cross the wire, so they are not registered)."""

from __future__ import annotations

from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import FerryError


class DataLossError(FerryError):
    """Offsets a query still had to read are gone (retention deleted them), and
    failOnDataLoss is on."""

    code = ResponseCode.PULL_OFFSET_MOVED
