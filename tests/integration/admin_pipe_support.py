"""`ferry admin ...` run as a subprocess with stdout a pipe (as `| grep` makes it), for the
tests of mqadmin's commands, and a check that values come out whole."""

from __future__ import annotations

import subprocess
from typing import Any

from itest_support import FERRY


def admin_run(target: Any, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`ferry admin <args> -n <name server>`; target is a name server address, anything with
    a `namesrv` (a Cluster), or None for commands that need none."""
    namesrv = getattr(target, "namesrv", target)
    return subprocess.run(
        [FERRY, "admin", *args, *(["-n", namesrv] if namesrv else [])],
        capture_output=True,  # stdout a pipe
        text=True,
        timeout=timeout,
        check=False,
    )


def admin_piped(target: Any, *args: str) -> str:
    """What the command printed; it must have succeeded."""
    done = admin_run(target, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def lines_with(out: str, *values: str) -> list[str]:
    """The lines holding every value as a whole word (never broken, never glued to another)."""
    lines = [ln for ln in out.splitlines() if all(v in ln.split() for v in values)]
    assert lines, f"no line holds all of {values!r} whole:\n{out}"
    return lines
