"""Venvs that hold RocketMQ's own Python clients, for the tests and benchmarks of the doors.

`rocketmq` 0.4.4 (remoting, rocketmq-client-cpp inside) and `rocketmq-python-client` (gRPC)
both install the top-level package `rocketmq`, so neither can live in the workspace venv and
each gets a venv of its own under <repo>/.ferry/venvs/. A test runs its client program with
the python this module returns.

Building is idempotent and safe when several pytest workers ask at once: an exclusive file
lock serialises them, and a marker written last tells a finished venv from one whose build
was cut short (that one is removed and built again).

Run `python -m ferry.runtime.testing.client_venvs` to build both ahead of the tests; it prints
each python's path (`... client_venvs remoting` or `... grpc` builds one).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

ROCKETMQ_REMOTING_CLIENT = "rocketmq==0.4.4"
ROCKETMQ_GRPC_CLIENT = "rocketmq-python-client==5.1.2"
_MARKER = "ferry-venv-complete"


def repo_root() -> Path:
    """The checkout this module runs from (the folder holding uv.lock), else the current one."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "uv.lock").is_file():
            return parent
    return Path.cwd()


def rocketmq_remoting_python(root: Path | None = None) -> Path:
    """The python of a venv holding exactly `rocketmq==0.4.4`, built when missing."""
    return client_venv_python("rocketmq-0.4.4", [ROCKETMQ_REMOTING_CLIENT], root=root)


def rocketmq_grpc_python(root: Path | None = None) -> Path:
    """The python of a venv holding `rocketmq-python-client==5.1.2` (RocketMQ 5's gRPC client)
    and what pip picks for its unpinned grpcio, protobuf and opentelemetry, built when missing."""
    return client_venv_python("rocketmq-python-client-5.1.2", [ROCKETMQ_GRPC_CLIENT], root=root)


def client_venv_python(name: str, requirements: list[str], *, root: Path | None = None) -> Path:
    """The python of venv `name` under <root>/.ferry/venvs holding `requirements`; builds it
    (`python -m venv` with this interpreter, then the venv's own pip) unless a finished one
    with the same requirements is there. Raises RuntimeError with pip's output on failure."""
    venvs = (root or repo_root()) / ".ferry" / "venvs"
    venvs.mkdir(parents=True, exist_ok=True)
    home = venvs / name
    python = home / "bin" / "python"
    wanted = "\n".join(requirements) + "\n"
    if _finished(home, wanted):
        return python
    with (venvs / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if _finished(home, wanted):  # built by another worker while we waited
            return python
        shutil.rmtree(home, ignore_errors=True)
        # this interpreter's venv module: a venv made from a venv's python is based on its base
        _run(
            [sys.executable, "-m", "venv", *([] if requirements else ["--without-pip"]), str(home)]
        )
        if requirements:
            _run([str(python), "-m", "pip", "install", "--no-input", *requirements])
        (home / _MARKER).write_text(wanted)
    return python


def _finished(home: Path, wanted: str) -> bool:
    marker = home / _MARKER
    try:
        return marker.read_text() == wanted and (home / "bin" / "python").exists()
    except OSError:
        return False


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )


_BUILDERS = {"remoting": rocketmq_remoting_python, "grpc": rocketmq_grpc_python}


def main(argv: list[str] | None = None) -> None:
    names = (sys.argv[1:] if argv is None else argv) or list(_BUILDERS)
    unknown = [name for name in names if name not in _BUILDERS]
    if unknown:
        raise SystemExit(f"unknown client venv {unknown}; choose from {sorted(_BUILDERS)}")
    for name in names:
        print(_BUILDERS[name]())


if __name__ == "__main__":
    main()
