"""A program of RocketMQ 5's official Python client kept running for a test: written to a
file, run with the client venv's python (client_venvs), HOME in the test's folder (importing
the client writes ~/logs); its stdout's JSON lines collected by a thread, its stderr kept in
a file; lines sent to its stdin; stopped by a last line and the end of its input."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from ferry.runtime.testing.client_venvs import rocketmq_grpc_python

_runs = itertools.count(1)


class RunningClient:
    def __init__(self, home: Path, program: str, *args: str, name: str = "client") -> None:
        run = f"{name}-{next(_runs)}"
        script = home / f"{run}.py"
        script.write_text(program)
        self.stderr_path = home / f"{run}.stderr"
        self._stderr = self.stderr_path.open("w")
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [str(rocketmq_grpc_python()), str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "HOME": str(home)},
        )
        self._reader = threading.Thread(target=self._read, name=f"{run}-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 60) -> int:
        """A "stop" line, then the end of its input; its exit code (killed after `timeout`)."""
        try:
            if self.proc.stdin is not None:
                if self.proc.poll() is None:
                    with contextlib.suppress(BrokenPipeError):  # it ended already
                        self.proc.stdin.write("stop\n")
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=5)  # it ends at the output's end
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr.close()

    def stderr_tail(self) -> str:
        return self.stderr_path.read_text()[-3000:]
