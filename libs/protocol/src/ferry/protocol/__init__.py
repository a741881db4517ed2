"""Ferry's wire protocol: envelopes, requests and replies, codes, typed errors, record codec."""

from ferry.protocol.codes import Perm, PullStatus, RequestCode, ResponseCode, SendStatus
from ferry.protocol.errors import FerryError, error_for
from ferry.protocol.version import PROTOCOL_ID, PROTOCOL_VERSION, RECORD_VERSION

__all__ = [
    "PROTOCOL_ID",
    "PROTOCOL_VERSION",
    "RECORD_VERSION",
    "FerryError",
    "Perm",
    "PullStatus",
    "RequestCode",
    "ResponseCode",
    "SendStatus",
    "error_for",
]
