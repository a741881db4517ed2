"""JSON state files under <storePathRootDir>/config, replaced atomically (ferry.runtime.files
writes them: a crash leaves the old file or the new one, never a torn mix)."""

from __future__ import annotations

from ferry.runtime.files import StateFileError, load_json, save_json, write_atomic

__all__ = ["StateFileError", "load_json", "save_json", "write_atomic"]
