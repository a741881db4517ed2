"""Loaded at interpreter start in the Ferry services that bench/profile_ferry.py starts (it puts
this folder on their PYTHONPATH and sets FERRY_CPROFILE_DIR): SIGUSR1 starts cProfile on the
main thread (where a service's loop runs), SIGUSR2 stops it and writes <dir>/<pid>.prof.
Nothing happens without FERRY_CPROFILE_DIR, so the services themselves carry no hook."""

import cProfile
import os
import signal

_DIR = os.environ.get("FERRY_CPROFILE_DIR")

if _DIR:
    _profile = cProfile.Profile()

    def _start(_signum: int, _frame: object) -> None:
        _profile.enable()

    def _stop(_signum: int, _frame: object) -> None:
        _profile.disable()
        final = os.path.join(str(_DIR), f"{os.getpid()}.prof")
        _profile.dump_stats(final + ".tmp")
        os.replace(final + ".tmp", final)  # whole, or not there yet
        _profile.clear()

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
