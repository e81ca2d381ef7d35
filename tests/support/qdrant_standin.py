"""A networked Qdrant for tests: Qdrant's REST API (the subset hivemem's server store calls,
through qdrant-client with prefer_grpc=False) over HTTP on loopback, backed by qdrant-edge.

No Qdrant server can be installed on the CI machines; this exists so that several real
worker processes can share one vector store in tests, and so that the server store meets
real HTTP status codes (409 on an existing collection, 404, 400 with Qdrant's message, 5xx
and dropped connections injected on purpose). Production uses a real Qdrant server or
cluster.

In-process: ``with QdrantStandin(tmp_path) as qdrant: ... qdrant.url``.
As a process: ``python -m tests.support.qdrant_standin --port 0 --path DIR`` prints
``qdrant-standin listening on http://127.0.0.1:PORT`` once it serves (see `spawn`).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.qdrant_standin_engine import ApiError, Engine, parse_body

# The Qdrant release whose REST API this follows (docker-compose.yml runs the same image);
# qdrant-client warns when its minor version is more than one away.
QDRANT_VERSION = "1.19.0"
_ORDERING = {"weak", "medium", "strong"}
_CONSISTENCY = {"majority", "quorum", "all"}
_COLLECTION = r"/collections/(?P<name>[^/]+)"
Route = tuple[str, re.Pattern[str], str]
_ROUTES: list[Route] = [
    ("GET", re.compile(r"/collections"), "list"),
    ("GET", re.compile(_COLLECTION + r"/exists"), "exists"),
    ("GET", re.compile(_COLLECTION), "info"),
    ("PUT", re.compile(_COLLECTION), "create"),
    ("DELETE", re.compile(_COLLECTION), "delete"),
    ("PUT", re.compile(_COLLECTION + r"/index"), "create_index"),
    ("PUT", re.compile(_COLLECTION + r"/points"), "upsert"),
    ("PUT", re.compile(_COLLECTION + r"/points/vectors"), "update_vectors"),
    ("POST", re.compile(_COLLECTION + r"/points"), "retrieve"),
    ("POST", re.compile(_COLLECTION + r"/points/query"), "query"),
    ("POST", re.compile(_COLLECTION + r"/points/query/batch"), "query_batch"),
    ("POST", re.compile(_COLLECTION + r"/points/scroll"), "scroll"),
    ("POST", re.compile(_COLLECTION + r"/points/count"), "count"),
    ("POST", re.compile(_COLLECTION + r"/points/delete"), "delete_points"),
]


@dataclass
class Fault:
    """The next `count` requests matching `method` and `path` (a regex searched in the path)
    fail: with `status` and Qdrant's error body, or by closing the connection unanswered
    (`status=0`). `delay_s` first stalls the request (a slow server)."""

    method: str
    path: str
    status: int = 503
    count: int = 1
    message: str = "Service internal error: injected by the test"
    delay_s: float = 0.0
    # Only requests whose body holds this text (a turn Qdrant refuses, say).
    body_contains: str | None = None
    # With status 200: answer this result instead of the real one (e.g. a stale "exists").
    result: Any = None

    def matches(self, method: str, path: str, raw: bytes) -> bool:
        return (
            self.count > 0 and self.method in (method, "*") and bool(re.search(self.path, path))
            and (self.body_contains is None or self.body_contains.encode() in raw)
        )


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, str]
    status: int = 200


@dataclass
class Faults:
    plan: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> None:
        with self.lock:
            self.plan.append(fault)

    def clear(self) -> None:
        with self.lock:
            self.plan.clear()

    def take(self, method: str, path: str, raw: bytes) -> Fault | None:
        with self.lock:
            for fault in self.plan:
                if fault.matches(method, path, raw):
                    fault.count -= 1
                    return fault
        return None


def _params(query: str) -> dict[str, str]:
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    ordering = params.get("ordering")
    if ordering is not None and ordering not in _ORDERING:
        raise ApiError(400, f"Deserialize error in query parameters: unknown variant"
                            f" `{ordering}`, expected one of `weak`, `medium`, `strong`")
    consistency = params.get("consistency")
    if consistency is not None and consistency not in _CONSISTENCY and not (
        consistency.isdigit() and int(consistency) >= 1
    ):
        raise ApiError(400, f"Deserialize error in query parameters: bad consistency"
                            f" {consistency!r}")
    return params


class QdrantStandin:
    def __init__(self, path: Path | str, *, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None) -> None:
        self.engine = Engine(Path(path))
        self.api_key = api_key
        self.faults = Faults()
        self.seen: list[Seen] = []
        self._seen_lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> QdrantStandin:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="qdrant-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.engine.close()

    def __enter__(self) -> QdrantStandin:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def record(self, seen: Seen) -> None:
        with self._seen_lock:
            self.seen.append(seen)
            del self.seen[:-5000]

    def requests(self, route_path: str = "") -> list[Seen]:
        with self._seen_lock:
            return [s for s in self.seen if re.search(route_path, s.path)]

    def answer(self, method: str, path: str, query: str, raw: bytes,
               headers: Any) -> tuple[int, Any]:
        """(status, JSON body) for one request; `(0, None)` drops the connection."""
        if path in ("/healthz", "/readyz", "/livez"):  # Qdrant answers these without a key
            return 200, "healthz check passed"
        if path.startswith("/_standin/"):
            return self._admin(method, path, raw)
        if self.api_key is not None:
            bearer = (headers.get("authorization") or "").removeprefix("Bearer ")
            if self.api_key not in (headers.get("api-key"), bearer):
                return 401, _error("Must provide an API key or an Authorization bearer token",
                                   0.0)
        if path == "/":
            return 200, {"title": "qdrant - vector search engine", "version": QDRANT_VERSION,
                         "commit": "hivemem-test-standin"}
        fault = self.faults.take(method, path, raw)
        if fault is not None:
            time.sleep(fault.delay_s)
            if fault.status == 0:
                self.record(Seen(method, path, {}, 0))
                return 0, None
            if fault.status != 200:
                self.record(Seen(method, path, {}, fault.status))
                return fault.status, _error(fault.message, 0.0)
            if fault.result is not None:
                return 200, {"result": fault.result, "status": "ok", "time": 0.0}
        started = time.perf_counter()
        try:
            params = _params(query)
            status, result = 200, self._route(method, path, parse_body(raw))
        except ApiError as exc:
            params = {}
            status, result = exc.status, exc
        self.record(Seen(method, path, params, status))
        elapsed = time.perf_counter() - started
        if isinstance(result, ApiError):
            return status, _error(result.message, elapsed)
        return 200, {"result": result, "status": "ok", "time": elapsed}

    def _route(self, method: str, path: str, body: Any) -> Any:
        for route_method, pattern, action in _ROUTES:
            match = pattern.fullmatch(path)
            if match and route_method == method:
                handler: Callable[..., Any] = getattr(self.engine, action)
                args = [match.group("name")] if "name" in pattern.groupindex else []
                if action not in ("list", "exists", "info", "delete"):
                    if not isinstance(body, dict):
                        raise ApiError(400, "Format error in JSON body: expected an object")
                    args.append(body)
                return self.engine.locked(handler, *args)
        raise ApiError(404, f"Not found: {method} {path}")

    def _admin(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        if path == "/_standin/faults" and method == "POST":
            self.faults.add(Fault(**json.loads(raw)))
            return 200, {"result": True, "status": "ok", "time": 0.0}
        if path == "/_standin/faults" and method == "DELETE":
            self.faults.clear()
            return 200, {"result": True, "status": "ok", "time": 0.0}
        if path == "/_standin/requests" and method == "GET":
            seen = [s.__dict__ for s in self.requests()]
            return 200, {"result": seen, "status": "ok", "time": 0.0}
        return 404, _error(f"Not found: {method} {path}", 0.0)


def _error(message: str, elapsed: float) -> dict[str, Any]:
    return {"status": {"error": message}, "time": elapsed, "result": None}


def _handler_for(standin: QdrantStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as qdrant-client's httpx pool expects
        # Headers and body go out as two writes: without this, Nagle + delayed ACK add
        # ~40 ms to every request.
        disable_nagle_algorithm = True

        def log_message(self, *_args: Any) -> None:  # quiet: tests read `standin.seen`
            return

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            status, body = standin.answer(self.command, parts.path, parts.query, raw,
                                          self.headers)
            if status == 0:
                self.close_connection = True
                self.connection.close()
                return
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # http.server dispatches on these names.
        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve  # noqa: N815

    return Handler


@dataclass
class StandinProcess:
    """A stand-in in its own process (see `spawn`)."""

    process: subprocess.Popen[str]
    url: str

    def add_fault(self, fault: Fault) -> None:
        request = urllib.request.Request(
            f"{self.url}/_standin/faults", data=json.dumps(fault.__dict__).encode(),
            method="POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def spawn(path: Path, *, port: int = 0, cwd: Path | None = None,
          timeout_s: float = 30.0) -> StandinProcess:
    """Start `python -m tests.support.qdrant_standin` and wait until it serves."""
    repo = cwd or Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.qdrant_standin", "--port", str(port),
         "--path", str(path)],
        cwd=repo, stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = ""
    while time.monotonic() < deadline and process.poll() is None:
        line = process.stdout.readline()
        if line.startswith("qdrant-standin listening on "):
            return StandinProcess(process, line.rsplit(" ", 1)[-1].strip())
    process.kill()
    raise RuntimeError(f"the Qdrant stand-in did not start (last line {line!r})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.qdrant_standin",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--path", required=True, type=Path, help="folder for the collections")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    standin = QdrantStandin(args.path, host=args.host, port=args.port, api_key=args.api_key)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    standin.start()
    print(f"qdrant-standin listening on {standin.url}", flush=True)
    stopped.wait()
    standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
