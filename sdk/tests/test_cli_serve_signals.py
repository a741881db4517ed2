"""`ferry serve`'s stop signal: a SIGTERM that lands while the supervisor sits in
stop.wait() must still stop it (once, it hung a whole broker tree: the handler's
Event.set() waited for the lock the interrupted wait held)."""

from __future__ import annotations

import subprocess
import sys

# 300 SIGTERMs at itself while the main thread does nothing but stop.wait(): the handler
# written as `stop.set()` deadlocked here on the first few dozen.
SCRIPT = """
import os, signal, threading, time
from ferry.cli.serve import on_signals

stop = on_signals()
sent = threading.Event()

def send() -> None:
    for _ in range(300):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.0002)  # wait-ok: spacing the signals, not waiting for readiness
    sent.set()

threading.Thread(target=send, daemon=True).start()
while not sent.is_set():
    stop.wait(0.00001)
print("stopped" if stop.wait(5) else "never set")
"""


def test_sigterm_during_the_supervisors_wait_sets_stop_and_never_deadlocks() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGTERM is the signal under test: it would be caught
        proc.communicate()
        raise AssertionError("the process hung: a signal handler deadlocked") from None
    assert proc.returncode == 0, err
    assert out.strip() == "stopped"
