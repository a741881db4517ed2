"""`make install` (and every make target that syncs) keeps each dependency group installed.

An exact `uv sync` removes whatever the lock has but the command did not ask for, so a sync
without the `bench` group once uninstalled the peers' clients `make bench-peers` had put in the
shared environment (issue 24.7). These tests read the commands make would run (`make -n`)
and ask uv what they would remove (`--dry-run`); nothing here changes the environment.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
# Targets whose recipes install Python packages (directly or through `install`).
TARGETS = ["install", "up", "lint", "fmt", "images", "test", "bench", "bench-peers"]
# Flags that leave a group out of a sync.
EXCLUDING = {"--no-dev", "--only-dev", "--no-default-groups", "--no-group", "--only-group"}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _groups() -> set[str]:
    groups = set(_pyproject()["dependency-groups"])
    assert {"dev", "bench"} <= groups
    return groups


def _default_groups(groups: set[str]) -> set[str]:
    """The groups uv syncs unless told otherwise (`dev` unless tool.uv says)."""
    default = _pyproject().get("tool", {}).get("uv", {}).get("default-groups", ["dev"])
    return groups if default == "all" else set(default)


def _uv_lines(target: str) -> list[list[str]]:
    """The uv commands `make <target>` would run, split into words."""
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    commands = []
    for line in done.stdout.splitlines():
        found = re.search(r"\buv (sync|run)\b[^|>;&]*", line)
        if found:
            commands.append(shlex.split(found.group(0)))
    return commands


def _covers_every_group(args: list[str], groups: set[str]) -> bool:
    if any(a.split("=")[0] in EXCLUDING for a in args):
        return False
    if "--all-groups" in args:
        return True
    named = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--group"}
    return groups <= named | _default_groups(groups)


@pytest.mark.parametrize("target", TARGETS)
def test_every_sync_includes_every_group(target: str) -> None:
    groups = _groups()
    syncs = [c for c in _uv_lines(target) if c[1] == "sync"]
    if target in ("install", "bench-peers"):
        assert syncs, f"make -n {target} runs no uv sync"
    for sync in syncs:
        assert _covers_every_group(sync, groups), f"make {target}: {shlex.join(sync)}"
    # `uv run` syncs too, inexactly unless told --exact.
    for run in (c for c in _uv_lines(target) if c[1] == "run"):
        assert "--exact" not in run, f"make {target}: {shlex.join(run)}"


def _group_packages(groups: set[str]) -> set[str]:
    """Every package the lock installs for these groups, their own dependencies included."""
    flags = [f"--only-group={g}" for g in sorted(groups)]
    done = subprocess.run(
        [*_uv(), "export", "--frozen", "--all-packages", "--no-hashes", "--no-header", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    names = {
        re.split(r"[=<>;\[ ]", line.strip(), maxsplit=1)[0].lower()
        for line in done.stdout.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-e", "."))
    }
    assert {"redis", "pika", "pytest"} <= names
    return names


def _uv() -> list[str]:
    """uv as the tests' environment finds it (the printed `python3 -m uv` may name the venv's
    python, which has no uv module)."""
    found = shutil.which("uv")
    return [found] if found else ["python3", "-m", "uv"]


def test_install_would_uninstall_no_group_package() -> None:
    """uv itself, asked what `make install`'s sync would do to this environment: it removes
    nothing that a dependency group installs. (With the bench group installed, as the shared
    environment has it, the old `uv sync --frozen --all-packages` fails here: it would
    uninstall redis, hiredis, nats-py, pika and py-spy.)"""
    syncs = [c for c in _uv_lines("install") if c[1] == "sync"]
    assert len(syncs) == 1
    done = subprocess.run(
        [*_uv(), *syncs[0][1:], "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    report = done.stdout + done.stderr
    removed = {m.group(1).lower() for m in re.finditer(r"^ - ([A-Za-z0-9_.\-]+)==", report, re.M)}
    kept = _group_packages(_groups())
    assert not removed & kept, f"make install would uninstall {sorted(removed & kept)}:\n{report}"
