"""Loaded at interpreter start in the Ferry services that bench/handler_cpu.py starts (it puts
this folder on their PYTHONPATH and sets FERRY_TIMING_DIR): wraps a few functions of the
service loop and of the send path so that each call adds the thread CPU time it took
(time.thread_time_ns: the scheduler's own figure, kernel time of its syscalls included, no
time spent blocked). SIGUSR1 clears the sums; SIGUSR2 writes <dir>/<pid>.json. Nothing happens
without FERRY_TIMING_DIR, so the services themselves carry no hook.

Unlike cProfile (a hook on every call, several times the cost of a small function) this wraps
only the functions named below, each by one closure; unlike py-spy it cannot take a thread
blocked in a lock or a poll for a working one."""

import os

_DIR = os.environ.get("FERRY_TIMING_DIR")

# (module, class, method): what is timed, where it exists in the process
TIMED = (
    ("ferry.runtime.service", "Service", "_ready"),
    ("ferry.runtime.service", "Service", "_dispatch"),
    ("ferry.runtime.service", "Service", "_run_timers"),
    ("ferry.runtime.service", "Service", "send_reply"),
    ("ferry.runtime.service", "Peer", "request"),
    ("ferry.runtime.service", "Peer", "_on_readable"),
    ("ferry.store.put_handler", "PutHandler", "put"),
    ("ferry.store.store", "MessageStore", "put"),
    ("ferry.remoting.send", "SendProcessor", "handle"),
)

if _DIR:
    import collections
    import importlib
    import json
    import signal
    import sys
    import time

    _sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])

    def _wrap(cls: type, name: str, label: str) -> None:
        inner = getattr(cls, name)
        clock = time.thread_time_ns

        def timed(*args: object, **kwargs: object) -> object:
            started = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                entry = _sums[label]
                entry[0] += clock() - started
                entry[1] += 1

        setattr(cls, name, timed)

    for module, cls_name, method in TIMED:
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            continue  # not in this service
        _wrap(cls, method, f"{cls_name}.{method}")

    def _clear(_signum: int, _frame: object) -> None:
        _sums.clear()

    def _dump(_signum: int, _frame: object) -> None:
        final = os.path.join(_DIR, f"{os.getpid()}.json")
        with open(final + ".tmp", "w") as out:
            json.dump({"argv": sys.argv, "sums": dict(_sums)}, out)
        os.replace(final + ".tmp", final)  # whole, or not there yet

    signal.signal(signal.SIGUSR1, _clear)
    signal.signal(signal.SIGUSR2, _dump)
