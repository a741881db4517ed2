"""Which release a service runs: the version its package was installed as (a ping's answer)."""

from __future__ import annotations

from importlib import metadata


def package_version(distribution: str) -> str:
    """The installed version of `distribution` (e.g. "ferry-index"), or "" when it is not
    installed (run from a source tree)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""
