"""The image's build key: the same tree gives the same key, so `make test` and the e2e
fixture do not rebuild the image every run (a wheel built again differs in its zip dates)."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "build_images.py"


def build_images() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_images", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel(path: Path, when: tuple[int, int, int, int, int, int], body: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as out:
        out.writestr(zipfile.ZipInfo("pkg/mod.py", when), body)
        out.writestr(zipfile.ZipInfo("pkg-0.1.dist-info/RECORD", when), b"pkg/mod.py,,\n")
    return path


def test_a_wheel_rebuilt_with_other_dates_keeps_its_key_and_a_changed_one_does_not(
    tmp_path: Path,
) -> None:
    key = build_images().content_hash
    first = wheel(tmp_path / "a.whl", (2026, 11, 27, 17, 6, 0), b"x = 1\n")
    again = wheel(tmp_path / "b.whl", (2026, 11, 27, 17, 45, 0), b"x = 1\n")
    changed = wheel(tmp_path / "c.whl", (2026, 11, 27, 17, 6, 0), b"x = 2\n")
    assert first.read_bytes() != again.read_bytes()  # the zips differ, as uv's do
    assert key(first) == key(again)
    assert key(first) != key(changed)
    plain = tmp_path / "Dockerfile"
    plain.write_text("FROM x\n")
    assert key(plain) != key(first)
