"""Rules of the house that a scan can pin: Redis is spoken in store/ only; nobody reads
another object's privates; one composition root; no import cycle; the read path outside
the producer."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hivemem"
IMPORTS_REDIS = re.compile(r"^\s*(?:import redis\b|from redis\b)", re.MULTILINE)

# Outside store/, only these may import redis-py, each for a reason that is not data:
ALLOWED = {
    "pipeline/topology.py",  # redis.crc.key_slot: which cluster slot a hash tag lands in
    "runtime/child_server.py",  # pings and stops embedded mode's own child server
    "testing.py",  # starts throwaway servers for tests and benchmarks
}


def _importers() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if IMPORTS_REDIS.search(p.read_text(encoding="utf-8"))
    }


def test_redis_replies_are_read_in_store_only() -> None:
    outside = {path for path in _importers() if not path.startswith("store/")}
    assert outside == ALLOWED


def test_the_pattern_finds_the_store_modules() -> None:
    assert "store/redis.py" in _importers()


# -- the composition root, privates, import cycles, the read path ---------------------------


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _calls_to(tree: ast.AST, names: set[str]) -> set[str]:
    """Names of `names` called in `tree` (``Name(...)``), wherever the call is."""
    return {node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in names}


def test_no_module_reads_another_objects_privates() -> None:
    config = (PACKAGE.parent / "pyproject.toml").read_text()
    assert re.search(r'^select = \[.*"SLF001"', config, re.MULTILINE)
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "SLF001", "--no-cache",
         "--output-format", "concise", str(PACKAGE)],
        capture_output=True, text=True, check=False, cwd=PACKAGE.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_pattern_finds_a_private_read(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def peek(client: object) -> object:\n    return client._redis\n")
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "SLF001", "--no-cache",
         "--isolated", str(sample)], capture_output=True, text=True, check=False)
    assert checked.returncode == 1 and "SLF001" in checked.stdout


def test_a_wiring_is_built_in_runtime_only() -> None:
    builders = {rel: calls for rel, path in _relative_modules()
                if (calls := _calls_to(ast.parse(path.read_text()), {"Wiring"}))}
    assert builders and all(rel.startswith("runtime/") for rel in builders), builders
    # The SDK client takes its wiring from the runtime (`wire`, or embedded mode's own):
    # one per process, never a second one beside embedded mode's.
    client = (PACKAGE / "producer" / "client.py").read_text()
    assert "runtime.wiring if runtime is not None else wire(" in client


def _relative_modules() -> list[tuple[str, Path]]:
    return [(path.relative_to(PACKAGE).as_posix(), path) for path in _modules().values()]


def _store_classes() -> set[str]:
    """Classes defined in store/ whose constructor takes a Redis connection or a vector
    store: the stores."""
    found: set[str] = set()
    for path in (PACKAGE / "store").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    annotations = {ast.unparse(a.annotation) for a in
                                   [*item.args.args, *item.args.kwonlyargs] if a.annotation}
                    if annotations & {"Redis", "VectorStore"}:
                        found.add(node.name)
    return found


# A store that builds a helper of its own on its own connection (not a second store of the
# deployment): where, and which.
STORE_HELPERS = {
    "store/streams.py": {"PartitionLeases", "Doorbell"},  # a consume loop's leases, bell
    "store/reflection.py": {"SessionLock"},  # `ReflectionState.lock`
    # Recovery at open, before any worker exists, on the one connection it is given.
    "store/rebuild.py": {"EpisodeStore", "StreamStore"},
}


def test_only_the_wiring_constructs_a_store() -> None:
    stores = _store_classes()
    assert {"SessionStore", "AuditLog", "ReflectionState", "ApiKeyStore", "TurnLog",
            "StreamStore", "EpisodeStore", "Repartition"} <= stores
    offenders: dict[str, set[str]] = {}
    for rel, path in _relative_modules():
        if rel == "runtime/wiring.py":
            continue
        calls = _calls_to(ast.parse(path.read_text()), stores) - STORE_HELPERS.get(rel, set())
        if calls:
            offenders[rel] = calls
    assert offenders == {}
    wiring = _calls_to(ast.parse((PACKAGE / "runtime" / "wiring.py").read_text()), stores)
    assert {"SessionStore", "AuditLog", "ReflectionState", "ApiKeyStore", "TurnLog"} <= wiring


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, TYPE_CHECKING imports and imports inside
    functions included."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str | None] = set()
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {resolve(a.name) for a in node.names if a.name.startswith("hivemem")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package[: len(package) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                if base.startswith("hivemem"):
                    deps |= {resolve(f"{base}.{a.name}") for a in node.names}
        graph[name] = {d for d in deps if d is not None and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package() -> None:
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = _import_graph()
    assert "hivemem.producer.client" in graph["hivemem.producer.aio"]
    graph["hivemem.service.core"] = {*graph["hivemem.service.core"], "hivemem.producer.admin"}
    assert ["hivemem.producer.admin", "hivemem.service.core"] in _cycles(graph)


def test_the_read_path_is_not_in_the_producer() -> None:
    graph = _import_graph()
    producer = {m: deps for m, deps in graph.items() if m.startswith("hivemem.producer")}
    assert producer
    assert {m: sorted(d for d in deps if d.startswith("hivemem.recall"))
            for m, deps in producer.items()
            if any(d.startswith("hivemem.recall") for d in deps)} == {}
    assert not (PACKAGE / "producer" / "views.py").exists()
    # The SDK reaches recall through the service only.
    assert "hivemem.service.reads" in graph["hivemem.service.core"]
