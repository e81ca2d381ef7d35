"""The async SDK's one trick: run a synchronous call in a worker thread, so the event loop
never blocks on Redis, Qdrant or the embedding model.

`twin(Sync.method)` makes the coroutine method of an async handle from its synchronous
one: the same parameters (the signature is the synchronous method's, so the two cannot
drift apart), run on ``self.sync`` in a worker thread. Handles write one line a method
instead of restating each signature and delegation.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
H = TypeVar("H")


class _HasSync(Protocol):
    @property
    def sync(self) -> Any: ...


class AsyncHandle(Generic[S]):
    """An async handle over a synchronous one (its methods are `twin`s)."""

    def __init__(self, sync: S) -> None:
        self._sync = sync

    @property
    def sync(self) -> S:
        """The synchronous handle every call runs on."""
        return self._sync


async def in_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


def twin(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[_HasSync, P], Coroutine[Any, Any, R]]:
    """The coroutine twin of a synchronous handle's method (see the module docstring)."""
    name = method.__name__

    # Looked up on the instance's synchronous handle at call time, so that a subclass (or a
    # test's stand-in) of the synchronous handle is the one that runs.
    async def call(self: _HasSync, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self.sync, name)
        return await in_thread(bound, *args, **kwargs)

    # Name, docstring, and `__wrapped__`, through which `inspect.signature` reports the
    # synchronous parameters.
    functools.update_wrapper(call, method)
    return call


def twin_classmethod(
    make: Callable[P, S], wrap: Callable[[type[H], S], H],
) -> classmethod[H, P, H]:
    """An async handle's constructor from a synchronous one's (`MemoryClient.local`): the
    same parameters; `wrap` puts the synchronous handle it makes into the async one. It
    does no I/O worth a thread, so it stays a plain classmethod."""

    def build(cls: type[H], /, *args: P.args, **kwargs: P.kwargs) -> H:
        return wrap(cls, make(*args, **kwargs))

    # `make` is bound to its class: its function (with `cls`) is what `inspect.signature`
    # must unwrap to, so that binding the twin drops `cls` and not the first parameter.
    functools.update_wrapper(build, getattr(make, "__func__", make))
    return classmethod(build)
