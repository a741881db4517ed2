"""The SDK installs and runs on its own: sdk/ with ferry.protocol and ferry.native only, in a
fresh virtual environment, without the services' runtime or the OpenTelemetry SDK. The
README tour, as written, runs there against a real cluster.

The environment is made with uv from the packages' paths; the third-party wheels come from
uv's cache (offline) when it has them, else from the package index.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from itest_support import Cluster

from ferry.admin import Admin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


def uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    python3 = shutil.which("python3")
    if python3 and subprocess.run([python3, "-m", "uv", "--version"], check=False).returncode == 0:
        return [python3, "-m", "uv"]
    pytest.fail("uv is not installed: make install puts it in place, so this test must run")


@pytest.fixture(scope="module")
def sdk_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv holding the SDK and what it depends on, nothing else."""
    venv = tmp_path_factory.mktemp("sdk-alone") / "venv"
    cmd = uv()
    subprocess.run([*cmd, "venv", "-q", str(venv), "--python", sys.executable], check=True)
    python = venv / "bin" / "python"
    install = [*cmd, "pip", "install", "-q", "--python", str(python)]
    packages = [str(ROOT / "sdk"), str(ROOT / "libs/protocol"), str(ROOT / "libs/native")]
    offline = subprocess.run(
        [*install, "--offline", *packages], capture_output=True, text=True, check=False
    )
    if offline.returncode != 0:  # something is not in uv's cache yet
        subprocess.run([*install, *packages], check=True, timeout=300)
    return python


def run(
    python: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in (env or os.environ).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(python), *args], capture_output=True, text=True, env=clean, timeout=120, check=False
    )


def test_the_sdk_imports_without_the_services_or_the_otel_sdk(sdk_python: Path) -> None:
    done = run(sdk_python, "-c", "import ferry.runtime")
    assert done.returncode != 0
    assert "No module named 'ferry.runtime'" in done.stderr
    done = run(sdk_python, "-c", "import opentelemetry.sdk")
    assert "No module named 'opentelemetry.sdk'" in done.stderr
    check = (
        "import sys, ferry.client, ferry.cli.output\n"
        "print(sorted(m for m in sys.modules if m.startswith('ferry.')))\n"
        "try:\n"
        "    ferry.client.enable_tracing()\n"
        "except ImportError as exc:\n"
        "    print('ImportError:', exc)\n"
    )
    done = run(sdk_python, "-c", check)
    assert done.returncode == 0, done.stderr
    assert "ferry.runtime" not in done.stdout
    assert "pip install 'ferry[tracing]'" in done.stdout  # says what to install


def test_the_readme_tour_runs_with_the_sdk_alone(
    sdk_python: Path, cluster: Cluster, tmp_path: Path
) -> None:
    with Admin(cluster.namesrv) as admin:  # the tour's `ferry admin updateTopic`
        admin.create_topic("TourTopic", 4, 4)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    assert "Producer(" in tour and "PullConsumer(" in tour
    script = tmp_path / "tour.py"
    script.write_text(tour)
    done = run(sdk_python, str(script), env={**os.environ, "NAMESRV_ADDR": cluster.namesrv})
    assert done.returncode == 0, done.stderr
    assert "SEND_OK" in done.stdout
    assert "b'hello ferry'" in done.stdout
    assert done.stdout.count("b'batch ") == 10
    assert "pushed TagA b'hello ferry'" in done.stdout
    assert "COMMIT" in done.stdout
