"""LineRelay: how `ferry dev up` and `ferry serve broker` relay their services' output."""

from __future__ import annotations

import threading
from pathlib import Path

from ferry.runtime.launcher import LineRelay


def test_a_services_ready_line_is_relayed_as_listening_under_its_name(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("w", encoding="utf-8") as stream:
        relay = LineRelay(stream)
        relay.service_line("broker-store", "READY broker-store endpoint=ipc:///s feed=ipc:///f")
        relay.service_line("index", "2026-11-26 INFO index: waiting for the store's READY")
        relay.service_line("index", "READY index endpoint=tcp://127.0.0.1:5")
        relay.write("READY namesrv=127.0.0.1:9876 console=http://127.0.0.1:8080")
    assert out.read_text(encoding="utf-8").splitlines() == [
        "[broker-store] listening endpoint=ipc:///s feed=ipc:///f",
        "[index] 2026-11-26 INFO index: waiting for the store's ready",
        "[index] listening endpoint=tcp://127.0.0.1:5",
        "READY namesrv=127.0.0.1:9876 console=http://127.0.0.1:8080",
    ]


def test_lines_of_many_services_at_once_stay_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    names = [f"svc{i}" for i in range(6)]
    body = "x" * 300  # longer than one write of a pipe's reader may take
    with out.open("w", encoding="utf-8") as stream:
        relay = LineRelay(stream)

        def pump(name: str) -> None:
            for n in range(300):
                relay.service_line(name, f"{n} {body}")

        threads = [threading.Thread(target=pump, args=(name,)) for name in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 * 300
    for line in lines:
        name, _, rest = line.partition("] ")
        assert name[1:] in names
        assert rest.endswith(body)
        assert rest.split()[0].isdigit()
