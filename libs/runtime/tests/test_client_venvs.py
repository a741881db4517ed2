"""client_venvs: a venv is built once, also when two processes ask at once, and one whose
build did not finish, or that holds other requirements, is built again. Uses venvs without
requirements (no pip, no index), so it runs in a few seconds offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ferry.runtime.testing.client_venvs import client_venv_python

_ASK = (
    "import sys; from pathlib import Path; "
    "from ferry.runtime.testing.client_venvs import client_venv_python; "
    "print(client_venv_python('v', [], root=Path(sys.argv[1])))"
)


def _works(python: Path) -> bool:
    done = subprocess.run(
        [str(python), "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and done.stdout.strip() == str(python.parent.parent)


def test_two_processes_at_once_get_one_working_venv(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ASK, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {out.strip() for out, _ in outs}
    assert paths == {str(tmp_path / ".ferry" / "venvs" / "v" / "bin" / "python")}
    assert _works(Path(paths.pop()))


def test_a_finished_venv_is_kept(tmp_path: Path) -> None:
    python = client_venv_python("v", [], root=tmp_path)
    keep = python.parent.parent / "kept"
    keep.write_text("still here")
    assert client_venv_python("v", [], root=tmp_path) == python
    assert keep.exists()


def test_a_venv_without_its_marker_is_built_again(tmp_path: Path) -> None:
    home = tmp_path / ".ferry" / "venvs" / "v"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").write_text("half a venv")
    python = client_venv_python("v", [], root=tmp_path)
    assert _works(python)


def test_other_requirements_rebuild_the_venv(tmp_path: Path) -> None:
    python = client_venv_python("v", [], root=tmp_path)
    marker = python.parent.parent / "ferry-venv-complete"
    marker.write_text("somepackage==1\n")  # as if built for other requirements
    stale = python.parent.parent / "stale"
    stale.write_text("")
    assert client_venv_python("v", [], root=tmp_path) == python
    assert not stale.exists()
    assert marker.read_text() == "\n"
