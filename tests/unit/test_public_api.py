import inspect
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from typing import Any

import pytest

import hivemem


def test_all_is_pinned() -> None:
    assert sorted(hivemem.__all__) == [
        "AckTimeout",
        "Admin",
        "ApiError",
        "ApiKeyInfo",
        "ApiKeyStore",
        "AsyncAdmin",
        "AsyncMemoryClient",
        "AsyncRemoteMemory",
        "AsyncScopedMemory",
        "AuditEvent",
        "Backpressure",
        "CompactionDiff",
        "CompactionPolicy",
        "ConfigurationError",
        "ContextItem",
        "DeadLetter",
        "DiskErasure",
        "Episode",
        "ExcludedItem",
        "ExportSummary",
        "Fact",
        "FolderBusy",
        "ForgetReceipt",
        "ForgetRequest",
        "HivememError",
        "ImportRefused",
        "ImportScope",
        "ImportSummary",
        "KeyedTurn",
        "MalformedEntry",
        "MemoryClient",
        "ModelUnavailable",
        "NotFound",
        "NotPermitted",
        "OutOfScope",
        "PRESETS",
        "PipelineStatus",
        "ProcessingTimeout",
        "ProviderError",
        "RecallPolicy",
        "RecallResult",
        "ReflectionFailed",
        "ReflectionTimeout",
        "RelatedSession",
        "RemoteMemory",
        "RetryLater",
        "RetryPolicy",
        "Role",
        "Scope",
        "ScopedMemory",
        "ScoreComponents",
        "ScoringWeights",
        "SessionContext",
        "SessionInfo",
        "SessionStats",
        "Settings",
        "StageLag",
        "StoreRejected",
        "StoreUnavailable",
        "TimelineEvent",
        "TimelinePage",
        "Turn",
        "TurnInput",
        "Unauthorized",
        "ValidationError",
        "VectorStore",
        "WorkspaceError",
        "__version__",
        "connect",
        "connect_async",
    ]
    for name in hivemem.__all__:
        assert hasattr(hivemem, name)


def test_import_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, hivemem\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'rq', 'fastembed', 'qdrant_edge', 'qdrant_client', 'onnxruntime', 'fakeredis'})\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_errors_share_one_root() -> None:
    for name in ("ValidationError", "StoreUnavailable", "ProviderError", "ModelUnavailable",
                 "RetryLater", "ProcessingTimeout", "Backpressure", "NotFound", "OutOfScope",
                 "NotPermitted", "ConfigurationError", "WorkspaceError"):
        assert issubclass(getattr(hivemem, name), hivemem.HivememError)
    # Every error class the package defines is exported.
    for module in _package_modules():
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            # Not for library users: the LLM transport's and parser's details (raised as
            # ProviderError), and the CLI's own (printed by the CLI, never raised to code).
            internal = obj.__module__.startswith(("hivemem.providers.llm", "hivemem.cli"))
            if (issubclass(obj, hivemem.HivememError) and obj.__module__ == module.__name__
                    and not internal):
                assert obj.__name__ in hivemem.__all__, obj


def test_not_found_is_what_out_of_scope_is() -> None:
    # A caller cannot tell another namespace's session from a missing one, not even by type;
    # and existing `except ValidationError` code still catches both.
    assert hivemem.OutOfScope is hivemem.NotFound
    assert issubclass(hivemem.NotFound, hivemem.ValidationError)
    # An agent key naming another agent: a ValidationError of the field, not a NotFound.
    assert issubclass(hivemem.NotPermitted, hivemem.ValidationError)
    assert not issubclass(hivemem.NotPermitted, hivemem.NotFound)
    assert not issubclass(hivemem.ConfigurationError, hivemem.ValidationError)
    assert issubclass(hivemem.WorkspaceError, hivemem.ConfigurationError)


def test_missing_vector_store_is_a_configuration_error() -> None:
    from hivemem.config import QdrantSettings
    from hivemem.store.vectors.factory import open_vector_store

    with pytest.raises(hivemem.ConfigurationError, match="no vector store configured"):
        open_vector_store(QdrantSettings(url=None, path=None), 8)


CLIENTS = [
    (hivemem.MemoryClient, hivemem.AsyncMemoryClient),
    (hivemem.ScopedMemory, hivemem.AsyncScopedMemory),
    (hivemem.Admin, hivemem.AsyncAdmin),
]
# Sync name -> async name in annotations: a handle's twin returns the twin handle.
TWINS = {"MemoryClient": "AsyncMemoryClient", "ScopedMemory": "AsyncScopedMemory",
         "Admin": "AsyncAdmin", "Self": "Self"}
NOT_COROUTINES = {"scoped", "for_agent", "pin", "local"}  # they make handles, no I/O


def _public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and (callable(member) or isinstance(member, property))}


def _twin(annotation: object) -> object:
    if isinstance(annotation, str):
        for sync, aio in TWINS.items():
            annotation = re.sub(rf"\b{sync}\b", aio, annotation)
    return annotation


@pytest.mark.parametrize(("sync", "aio"), CLIENTS, ids=lambda c: c.__name__)
def test_async_twins_have_the_same_methods_and_signatures(sync: type, aio: type) -> None:
    mine = _public(sync)
    theirs = {k: v for k, v in _public(aio).items() if k != "sync"}  # the way back
    assert sorted(theirs) == sorted(mine)
    for name, member in mine.items():
        other = theirs[name]
        if isinstance(member, property):
            assert isinstance(other, property), name
            continue
        want = inspect.signature(member)
        got = inspect.signature(other)
        assert list(got.parameters.values()) == list(want.parameters.values()), name
        assert got.return_annotation == _twin(want.return_annotation), name
        assert inspect.iscoroutinefunction(other) == (name not in NOT_COROUTINES), name


def _classes(hint: object) -> Iterator[type]:
    if isinstance(hint, type):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes(arg)


@pytest.mark.parametrize("cls", [c for pair in CLIENTS for c in pair],
                         ids=lambda c: c.__name__)
def test_every_returned_type_is_exported(cls: type) -> None:
    for name, member in _public(cls).items():
        fn = member.fget if isinstance(member, property) else member
        returned = inspect.signature(fn).return_annotation
        if isinstance(returned, str):  # names the module or the package's surface knows
            returned = eval(returned, {**vars(sys.modules[fn.__module__]), **vars(hivemem)})
        for found in _classes(returned):
            if found.__module__.startswith("hivemem"):
                assert getattr(hivemem, found.__name__, None) is found, (cls, name, found)


def _package_modules() -> Iterator[Any]:
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(hivemem.__path__, "hivemem."):
        if info.name.endswith("__main__") or info.name.startswith((
                "hivemem.cli", "hivemem.api", "hivemem.mcp", "hivemem.evaluation",
                "hivemem.integrations")):
            continue  # entry points with optional dependencies; they define no errors
        yield importlib.import_module(info.name)


def test_a_twin_runs_the_sync_method_of_its_handle_in_a_worker_thread() -> None:
    import asyncio
    import threading

    from hivemem.producer.threads import AsyncHandle, twin

    class Sync:
        def work(self, x: int, *, y: int = 2) -> tuple[int, str]:
            """Doc."""
            return x * y, threading.current_thread().name

    class Louder(Sync):  # the instance's own method runs, not the one twinned
        def work(self, x: int, *, y: int = 2) -> tuple[int, str]:
            return -x * y, threading.current_thread().name

    class Async(AsyncHandle[Sync]):
        work = twin(Sync.work)

    value, thread = asyncio.run(Async(Sync()).work(3, y=4))
    assert value == 12 and thread != threading.current_thread().name
    assert asyncio.run(Async(Louder()).work(3))[0] == -6
    assert inspect.signature(Async.work) == inspect.signature(Sync.work)
    assert Async.work.__doc__ == "Doc." and Async.work.__name__ == "work"
    assert inspect.iscoroutinefunction(Async.work)


def test_a_constructor_twin_makes_the_async_handle_from_the_sync_constructor() -> None:
    from hivemem.producer.threads import AsyncHandle, twin_classmethod

    class Sync:
        def __init__(self, n: int) -> None:
            self.n = n

        @classmethod
        def make(cls, n: int, *, twice: bool = False) -> "Sync":
            """Doc."""
            return cls(n * 2 if twice else n)

    class Async(AsyncHandle[Sync]):
        make = twin_classmethod(Sync.make, lambda cls, sync: cls(sync))

    made = Async.make(3, twice=True)
    assert isinstance(made, Async) and made.sync.n == 6
    assert inspect.signature(Async.make) == inspect.signature(Sync.make)
    assert Async.make.__doc__ == "Doc." and not inspect.iscoroutinefunction(Async.make)
