"""An asyncio client's method that runs the sync client's own method in a worker thread: one
definition of its parameters, docstring and errors for both SDKs."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
SyncT = TypeVar("SyncT")
OwnerT = TypeVar("OwnerT")


def threaded(
    op: Callable[Concatenate[SyncT, P], T], sync_of: Callable[[OwnerT], SyncT]
) -> Callable[Concatenate[OwnerT, P], Coroutine[Any, Any, T]]:
    """op (a sync client's method) as a coroutine method of the asyncio client `owner`, run
    on sync_of(owner)."""

    async def run(owner: OwnerT, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(op, sync_of(owner), *args, **kwargs)

    functools.update_wrapper(run, op)
    return run
