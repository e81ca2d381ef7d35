"""The async SDK's one trick: run a synchronous call in a worker thread, so the event loop
never blocks on Redis, Qdrant or the embedding model."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


async def in_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


