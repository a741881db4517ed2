"""AuthFile: the users and ACLs of a broker, durable in <storePathRootDir>/config/auth.json
beside topics.json, replaced atomically at each change (ferry.runtime.files)."""

from __future__ import annotations

from pathlib import Path

from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import AuthSnapshot
from ferry.runtime.acl.edits import check_snapshot
from ferry.runtime.files import StateFileError, load_json, save_json

FILE_NAME = "auth.json"


class AuthFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> AuthSnapshot:
        """What the file holds (an empty snapshot at version 0 when there is none);
        StateFileError when it cannot be read or holds what no edit could have written."""
        snapshot = load_json(self.path, AuthSnapshot)
        if snapshot is None:
            return AuthSnapshot()
        try:
            return check_snapshot(snapshot)
        except InvalidParameterError as err:
            raise StateFileError(f"{self.path}: {err.message}; repair or remove it") from None

    def save(self, snapshot: AuthSnapshot) -> None:
        save_json(self.path, snapshot)
