"""A real local HTTP server that plays an LLM endpoint from a script, for tests.

It serves the OpenAI-compatible ``/chat/completions`` (and ``/v1/chat/completions``) and
Anthropic's ``/v1/messages`` on 127.0.0.1 (port 0), answers from a queue of `Reply` objects
and falls back to a default reply when the queue is empty. Every request is recorded.

    with ScriptedLLM() as llm:
        llm.push(Reply(status=429, headers={"Retry-After": "1"}), Reply(text='{"actions": []}'))
        reflector = OpenAICompatibleReflector(LLMConfig(provider="openai", base_url=llm.url,
                                                        model="m"))
        ...
        assert llm.requests[0].json["model"] == "m"

A `Reply` with ``text`` is wrapped in the wire format of the path it answers (a chat
completion or an Anthropic message), so one script serves both providers. ``body`` is sent
as is (a dict or list as JSON, str or bytes raw), or may be a callable taking the request
JSON and returning a body or a whole `Reply`. ``delay_s`` holds the response back (timeouts).
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

OPENAI_PATHS = frozenset({"/chat/completions", "/v1/chat/completions"})
ANTHROPIC_PATHS = frozenset({"/v1/messages"})

Body = dict[str, Any] | list[Any] | str | bytes | None


@dataclass
class Reply:
    status: int = 200
    text: str | None = None  # the model's text, wrapped per provider
    body: Body | Callable[[Any], Body | Reply] = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    json: Any  # None when the body was not JSON
    raw: bytes


def openai_completion(text: str, model: str = "scripted") -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def anthropic_message(text: str, model: str = "scripted") -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


class ScriptedLLM:
    """The server. A context manager: entering starts it, leaving stops it."""

    def __init__(self, default: Reply | None = None) -> None:
        self.default = default if default is not None else Reply(text='{"actions": []}')
        self.requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script ------------------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def push_texts(self, texts: Iterable[str]) -> None:
        self.push(*(Reply(text=t) for t in texts))

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="scripted-llm",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._closing.set()  # wakes delayed responses
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------------

    def _respond(self, path: str, request_json: Any) -> tuple[int, dict[str, str], bytes, float]:
        reply = self._next()
        delay = reply.delay_s
        body: Any = reply.body
        if callable(body):
            produced = body(request_json)
            if isinstance(produced, Reply):
                reply = produced
                body = reply.body
            else:
                body = produced
        if reply.text is not None and body is None:
            body = anthropic_message(reply.text) if path in ANTHROPIC_PATHS else (
                openai_completion(reply.text))
        headers = dict(reply.headers)
        if isinstance(body, bytes):
            raw = body
        elif isinstance(body, str):
            raw = body.encode()
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        elif body is None:
            raw = b""
        else:
            raw = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        return reply.status, headers, raw, delay


def _handler_for(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in separate writes: without this, Nagle's algorithm and
            # the client's delayed ACK add ~40 ms to every keep-alive response.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                payload: Any = json.loads(raw) if raw else None
            except ValueError:
                payload = None
            path = self.path.split("?", 1)[0]
            with llm._lock:
                llm.requests.append(
                    RecordedRequest(
                        method="POST",
                        path=path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        json=payload,
                        raw=raw,
                    )
                )
            if path not in OPENAI_PATHS | ANTHROPIC_PATHS:
                self._send(404, {"Content-Type": "application/json"},
                           json.dumps(error_body(f"no route {path}", "not_found")).encode())
                return
            status, headers, body, delay = llm._respond(path, payload)
            if delay > 0 and llm._closing.wait(delay):
                return  # shutting down
            self._send(status, headers, body)

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (a timeout)

    return Handler
